"""Start-up wiring of the model providers: register them with the engine and check
every model the deployment names, so a typo or a missing key stops start-up with an
``ImproperlyConfigured`` error naming the setting instead of failing runs later."""

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.agents import providers
from runs.engine.effects.model_providers import get_provider


def configure() -> None:
    """Register the providers and check ``AGENTOPS_MODEL``, ``AGENTOPS_MODEL_PRICES``
    and the models workflows and their steps name. Raises ``ImproperlyConfigured``."""
    from runs.workflows import registry

    providers.register()
    check_prices(settings.AGENTOPS_MODEL_PRICES)
    if settings.AGENTOPS_MODEL:
        get_provider(settings.AGENTOPS_MODEL, "AGENTOPS_MODEL")
    # Workflows declared lazily (register_lazy) are left out: importing them here would
    # cost every process their imports. Such a workflow names no model of its own.
    for workflow in registry.all_workflows(load=False):
        if workflow.model:
            get_provider(workflow.model, f"workflow {workflow.name}@{workflow.version} model")
        for step in workflow.steps:
            if step.model:
                get_provider(step.model, f"workflow {workflow.name} step {step.name} model")


def check_prices(prices: dict) -> None:
    """Each entry must be ``{"input": USD, "output": USD}`` per million tokens, >= 0."""
    for name, price in prices.items():
        try:
            values = [Decimal(str(price[k])) for k in ("input", "output")]
        except (TypeError, KeyError, InvalidOperation) as exc:
            raise ImproperlyConfigured(
                f"AGENTOPS_MODEL_PRICES[{name!r}] must be "
                '{"input": USD, "output": USD} per million tokens'
            ) from exc
        if any(not v.is_finite() or v < 0 for v in values):
            raise ImproperlyConfigured(f"AGENTOPS_MODEL_PRICES[{name!r}]: prices must be >= 0")
