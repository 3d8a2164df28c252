import django.db.models.deletion
from django.db import migrations, models

import runs.payload_field


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_payload_store"),
    ]

    operations = [
        # The column keeps its name; the field becomes ``data`` so ``state`` can be the
        # rebuilt whole state.
        migrations.RenameField(model_name="checkpoint", old_name="state", new_name="data"),
        migrations.AlterField(
            model_name="checkpoint",
            name="data",
            field=runs.payload_field.PayloadJSONField(db_column="state", default=dict),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="base",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="+",
                to="runs.checkpoint",
            ),
        ),
    ]
