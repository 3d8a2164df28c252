"""Approval and Takeover become models of the runs app (the engine's state). Their tables
keep their names (``approvals_approval``, ``approvals_takeover``) and their rows: the
models are created in the migration state only, and ``approvals`` 0004 removes them from
its own state afterwards.

The content types of the two models move along (their ``app_label`` becomes ``runs``),
so the permissions attached to them, ``decide_approval`` above all, and every user's and
group's grant of them stay; the permission is named ``runs.decide_approval`` from here on.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models

MOVED = ("approval", "takeover")


def _move_content_types(apps, schema_editor, source: str, target: str) -> None:
    """Relabel the moved models' content types from app ``source`` to ``target``; a model
    that already has one under ``target`` keeps that one (nothing to carry over)."""
    content_type = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for model in MOVED:
        if not content_type.objects.using(db).filter(app_label=target, model=model).exists():
            content_type.objects.using(db).filter(app_label=source, model=model).update(
                app_label=target
            )


def forwards(apps, schema_editor):
    _move_content_types(apps, schema_editor, "approvals", "runs")


def backwards(apps, schema_editor):
    _move_content_types(apps, schema_editor, "runs", "approvals")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_concurrency_and_rate_limits"),
        # The tables exist, at the shape the state below describes.
        ("approvals", "0003_non_determinism_cause"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Approval',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('question', models.TextField()),
                        ('reason', models.TextField(blank=True, default='')),
                        ('evidence', models.JSONField(blank=True, default=dict)),
                        ('status', models.CharField(choices=[('PENDING', 'Pending'), ('APPROVED', 'Approved'), ('REJECTED', 'Rejected'), ('EXPIRED', 'Expired'), ('CANCELLED', 'Cancelled')], default='PENDING', max_length=10)),
                        ('decided_at', models.DateTimeField(blank=True, null=True)),
                        ('comment', models.TextField(blank=True, default='')),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('routes', models.JSONField(blank=True, default=dict)),
                        ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='approvals', to='runs.run')),
                        ('step', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='approvals', to='runs.step')),
                    ],
                    options={
                        'db_table': 'approvals_approval',
                        'permissions': [('decide_approval', 'Can approve or reject approval requests')],
                        'indexes': [models.Index(fields=['status', 'expires_at'], name='approval_status_expiry')],
                    },
                ),
                migrations.CreateModel(
                    name='Takeover',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('cause', models.CharField(choices=[('unknown_outcome', 'Unknown Outcome'), ('retries_exhausted', 'Retries Exhausted'), ('budget_exhausted', 'Budget Exhausted'), ('unknown_workflow_version', 'Unknown Workflow Version'), ('artifact_invalid', 'Artifact Invalid'), ('operator_request', 'Operator Request'), ('non_determinism', 'Non Determinism')], max_length=40)),
                        ('reason', models.TextField()),
                        ('done_summary', models.JSONField(blank=True, default=dict)),
                        ('failed_at', models.CharField(blank=True, default='', max_length=200)),
                        ('suggested_action', models.TextField(blank=True, default='')),
                        ('evidence', models.JSONField(blank=True, default=dict)),
                        ('checkpoints', models.JSONField(blank=True, default=list)),
                        ('status', models.CharField(choices=[('OPEN', 'Open'), ('RESOLVED', 'Resolved')], default='OPEN', max_length=10)),
                        ('claimed_at', models.DateTimeField(blank=True, null=True)),
                        ('resolution', models.CharField(blank=True, default='', max_length=40)),
                        ('resolution_note', models.TextField(blank=True, default='')),
                        ('resolved_by', models.CharField(blank=True, default='', max_length=200)),
                        ('resolved_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ('claimed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='takeovers', to='runs.run')),
                        ('step', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='takeovers', to='runs.step')),
                    ],
                    options={
                        'db_table': 'approvals_takeover',
                        'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'OPEN')), fields=('run',), name='takeover_one_open_per_run')],
                    },
                ),
    
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
