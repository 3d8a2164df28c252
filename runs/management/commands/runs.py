"""``python manage.py runs SUBCOMMAND ...``: start, status, resume and more (see
``runs.cli.SUBCOMMANDS``)."""

from importlib import import_module

from runs.cli import SUBCOMMANDS
from runs.cli.command import OperatorCommand


class Command(OperatorCommand):
    help = "Start, inspect and steer runs."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, module_path in SUBCOMMANDS.items():
            module = import_module(module_path)
            module.add_arguments(sub.add_parser(name, help=module.help))

    def handle(self, *args, subcommand: str, **options):
        import_module(SUBCOMMANDS[subcommand]).handle(self, options)
