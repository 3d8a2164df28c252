"""Approval and Takeover are models of the runs app from ``runs`` 0024 on: removed from
this app's migration state only (the tables and their rows stay, now the runs app's)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_non_determinism_cause"),
        ("runs", "0021_approval_takeover_state"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="Approval"),
                migrations.DeleteModel(name="Takeover"),
            ],
            database_operations=[],
        ),
    ]
