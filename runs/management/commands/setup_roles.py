"""``python manage.py setup_roles``: create the viewer, operator and approver groups."""

from django.core.management.base import BaseCommand

from runs.console.roles import setup_roles


class Command(BaseCommand):
    help = "Create or update the console roles (groups viewer, operator, approver)."

    def handle(self, *args, **options):
        for role, group in setup_roles().items():
            perms = sorted(
                f"{p.content_type.app_label}.{p.codename}"
                for p in group.permissions.select_related("content_type")
            )
            actions = [p for p in perms if not p.split(".")[1].startswith("view_")]
            self.stdout.write(
                f"{role}: {len(perms)} permissions ({', '.join(actions) or 'read only'})"
            )
