"""A run's input to an agent workflow, checked at start and turned into ``agent.run``'s
arguments in the step.

Input keys:

- ``prompt`` (required, non-empty text): the user's message;
- ``deps``: the agent's dependencies as JSON, validated against the agent's
  ``deps_type`` (a Pydantic model, a dataclass, a TypedDict, or any type Pydantic
  validates); required when the agent declares one, refused when it declares none;
- ``model``, ``model_settings``, ``usage_limits``, ``metadata``: per-run options, each
  accepted only when the workflow lists it in ``register_agent(run_options=...)``:
  ``model`` a model name the deployment can use (``openai:gpt-4.1-mini``),
  ``model_settings`` Pydantic AI's ``ModelSettings`` (``{"temperature": 0.2}``),
  ``usage_limits`` Pydantic AI's ``UsageLimits`` (``{"request_limit": 5}``), ``metadata``
  a JSON object handed to the agent run.

Anything else is refused: a misspelt key must not be ignored silently.
"""

from functools import lru_cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from pydantic import TypeAdapter, ValidationError

RUN_OPTIONS = frozenset({"model", "model_settings", "usage_limits", "metadata"})
KNOWN = frozenset({"prompt", "deps"}) | RUN_OPTIONS


def takes_deps(agent) -> bool:
    """Whether ``agent`` declares a ``deps_type`` (Pydantic AI's default is ``object``,
    meaning "none declared"; ``None`` says "no deps")."""
    return agent.deps_type not in (object, type(None), None)


def input_errors(agent, data: dict, allowed: frozenset[str]) -> dict[str, str]:
    """Field errors (``{"deps.country": message}``) of the run input ``data`` beyond the
    prompt, for ``agent`` with the per-run options ``allowed``; empty when it fits."""
    errors: dict[str, str] = {}
    for key in sorted(set(data) - KNOWN):
        errors[key] = "is not an input of an agent workflow"
    for key in sorted((set(data) & RUN_OPTIONS) - allowed):
        errors[key] = "this workflow does not take it per run"
    if "deps" in data or takes_deps(agent):
        errors.update(_deps_errors(agent, data))
    if "model" in data and "model" in allowed:
        errors.update(_model_errors(data["model"]))
    for key in ("model_settings", "usage_limits", "metadata"):
        if key in data and key in allowed and not isinstance(data[key], dict):
            errors[key] = "must be a JSON object"
    if isinstance(data.get("model_settings"), dict) and "model_settings" in allowed:
        for name, value in data["model_settings"].items():
            adapter = _setting_adapters().get(name)
            if adapter is not None:
                errors.update(_validation_errors(f"model_settings.{name}", adapter, value))
    if isinstance(data.get("usage_limits"), dict) and "usage_limits" in allowed:
        limits = data["usage_limits"]
        for name in sorted(set(limits) - set(_limit_fields())):
            errors[f"usage_limits.{name}"] = "is not a usage limit"
        errors.update(_validation_errors("usage_limits", _limits(), limits))
    return errors


def run_arguments(agent, data: dict) -> dict[str, Any]:
    """``agent.run`` keyword arguments from a checked input: ``deps`` as the agent's
    ``deps_type``, ``model_settings``, ``usage_limits`` (Pydantic AI's defaults, with
    its request limit, when the input has none) and ``metadata``."""
    from pydantic_ai.usage import UsageLimits

    out: dict[str, Any] = {"usage_limits": UsageLimits()}
    if "deps" in data:
        out["deps"] = (
            TypeAdapter(agent.deps_type).validate_python(data["deps"])
            if takes_deps(agent)
            else data["deps"]
        )
    if "model_settings" in data:
        out["model_settings"] = dict(data["model_settings"])
    if "usage_limits" in data:
        out["usage_limits"] = _limits().validate_python(data["usage_limits"])
    if "metadata" in data:
        out["metadata"] = data["metadata"]
    return out


def _deps_errors(agent, data: dict) -> dict[str, str]:
    if agent.deps_type is type(None) or agent.deps_type is None:
        return {"deps": "this agent takes no deps"}
    if agent.deps_type is object:
        return {}
    if "deps" not in data:
        return {"deps": f"is required ({_type_name(agent.deps_type)})"}
    return _validation_errors("deps", TypeAdapter(agent.deps_type), data["deps"])


def _model_errors(name: Any) -> dict[str, str]:
    from runs.engine.effects.model_providers import get_provider

    if not isinstance(name, str) or not name.strip():
        return {"model": "must be a non-empty str"}
    try:
        get_provider(name, "model")
    except ImproperlyConfigured as exc:
        return {"model": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any refusal of the name is the input's fault
        return {"model": f"{type(exc).__name__}: {exc}"}
    return {}


def _validation_errors(key: str, adapter: TypeAdapter, value: Any) -> dict[str, str]:
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return {".".join([key, *(str(p) for p in err["loc"])]): err["msg"] for err in exc.errors()}
    return {}


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or repr(kind)


@lru_cache(maxsize=1)
def _setting_adapters() -> dict[str, TypeAdapter]:
    """A validator per setting of Pydantic AI's ``ModelSettings`` that JSON can carry
    (``timeout`` as seconds); a provider's own settings (``openai_...``) pass as given."""
    from pydantic_ai.settings import ModelSettings

    out = {}
    for name, kind in ModelSettings.__annotations__.items():
        try:
            out[name] = TypeAdapter(kind)
        except Exception:  # noqa: BLE001 - a type JSON cannot carry (an httpx.Timeout)
            out[name] = TypeAdapter(float)
    return out


def _limit_fields() -> list[str]:
    import dataclasses

    from pydantic_ai.usage import UsageLimits

    return [f.name for f in dataclasses.fields(UsageLimits)]


def _limits() -> TypeAdapter:
    from pydantic_ai.usage import UsageLimits

    return TypeAdapter(UsageLimits)
