import django.db.models
from django.db import migrations

import runs.checked_fields


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0021_approval_takeover_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="pause_requested_at",
            field=django.db.models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="pause_request",
            field=runs.checked_fields.CheckedJSONField(blank=True, default=dict),
        ),
    ]
