"""``python manage.py api_token create USERNAME [--name N]`` prints a new token (once);
``api_token list [USERNAME]`` shows tokens without their secret; ``api_token revoke PREFIX``."""

from django.core.management.base import CommandError

from apitokens.models import ApiToken
from apitokens.services import create_token, revoke
from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.cli.common import cli_user


class Command(OperatorCommand):
    help = "Create, list or revoke API tokens."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a token and print it (shown once)")
        create.add_argument(
            "username", type=arguments.required_text, help="the user the token acts as"
        )
        create.add_argument(
            "--name",
            default=None,
            type=arguments.identifier("token_name"),
            help="a label, e.g. the client's name (not blank)",
        )
        listing = sub.add_parser("list", help="list tokens (prefix, user, last used)")
        listing.add_argument(
            "username", nargs="?", type=arguments.required_text, help="only this user's tokens"
        )
        rev = sub.add_parser("revoke", help="revoke a token by its prefix")
        rev.add_argument(
            "prefix",
            type=arguments.required_text,
            help="the token's prefix, as list shows it (ao_...)",
        )

    def handle(self, *args, **options):
        getattr(self, "_" + options["action"])(options)

    def _create(self, options):
        user = cli_user(options["username"])
        _, raw = create_token(user, (options["name"] or "").strip())
        self.stdout.write(raw)

    def _list(self, options):
        tokens = ApiToken.objects.select_related("user").order_by("-created_at", "-pk")
        if options["username"] is not None:
            tokens = tokens.filter(user=cli_user(options["username"]))
        if not tokens:
            self.stdout.write("no tokens")
        for t in tokens:
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(
                f"{t.prefix}  {t.user.username}  {t.name or '-'}  {state}  last used {used}"
            )

    def _revoke(self, options):
        prefix = options["prefix"]
        active = ApiToken.objects.filter(revoked_at__isnull=True)
        tokens = list(active.filter(prefix=prefix))
        if len(tokens) > 1:
            raise CommandError(
                f"{len(tokens)} active tokens have prefix {prefix!r} [ambiguous_token]; "
                "revoke the right one in the admin (/admin/apitokens/apitoken/)"
            )
        if not tokens:
            prefixes = active.order_by("prefix").values_list("prefix", flat=True)[:20]
            raise CommandError(
                f"no active token with prefix {prefix!r} [unknown_token]; active prefixes: "
                f"{', '.join(prefixes) or 'none'} (python manage.py api_token list shows them)"
            )
        revoke(tokens[0])
        self.stdout.write(f"revoked {tokens[0].prefix}")
