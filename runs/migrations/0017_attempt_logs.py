import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_signals_timers_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="AttemptLog",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("attempt", models.PositiveIntegerField()),
                ("text", models.TextField(blank=True, default="")),
                ("truncated", models.BooleanField(default=False)),
                ("total_bytes", models.PositiveBigIntegerField(default=0)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_logs",
                        to="runs.run",
                    ),
                ),
                (
                    "step",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_logs",
                        to="runs.step",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("step", "attempt"), name="attempt_log_unique")
                ],
            },
        ),
    ]
