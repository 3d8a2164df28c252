"""``python manage.py setup_roles [--user NAME --role ROLE ...]``: create the viewer,
operator and approver groups, and optionally give a user (created if missing) roles."""

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.console.roles import ROLES, setup_roles


class Command(OperatorCommand):
    help = "Create or update the console roles (groups viewer, operator, approver)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--user",
            metavar="NAME",
            type=arguments.username,
            help="also give this user the --role roles (the user is created, without a "
            "password, if missing: set one with changepassword NAME to log in)",
        )
        parser.add_argument(
            "--role",
            action="append",
            choices=ROLES,
            default=[],
            help="a role for --user (repeat for several): " + ", ".join(ROLES),
        )

    def handle(self, *args, user: str | None, role: list[str], **options):
        if (user is None) != (not role):
            raise CommandError("--user and --role go together")
        groups = setup_roles()
        for name, group in groups.items():
            perms = sorted(
                f"{p.content_type.app_label}.{p.codename}"
                for p in group.permissions.select_related("content_type")
            )
            actions = [p for p in perms if not p.split(".")[1].startswith("view_")]
            self.stdout.write(
                f"{name}: {len(perms)} permissions ({', '.join(actions) or 'read only'})"
            )
        if user:
            account, created = get_user_model().objects.get_or_create(username=user)
            if created:
                account.set_unusable_password()
                account.save()
            account.groups.add(*(groups[r] for r in role))
            held = sorted(account.groups.values_list("name", flat=True))
            self.stdout.write(
                f"user {user} ({'created' if created else 'existing'}): roles {', '.join(held)}"
            )
