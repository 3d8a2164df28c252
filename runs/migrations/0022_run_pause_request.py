import django.db.models
from django.db import migrations

import runs.checked_fields


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_concurrency_and_rate_limits"),
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
