"""Per-pool overrides of the policy (issue 33): deep partial policies, and how they merge.

An override has the policy's shape with every field optional. Its sections,
its rungs and its fault classes are partial models generated from the
policy's own (so a field added to a section can be overridden at once). It is
merged like a policy file over the defaults: mappings key by key (one field of
one rung keeps the rung's others; ``breaker.per_pool`` adds or changes pools),
a scalar or a list replaces the base's. A field keeps its type and its own
bounds, so a wrong value is refused at its path
(``pools.p5.rungs.gpu_reset.enabled``); rules across fields (a start_rung above
max_rung, quarantine disabled) are checked on the effective policy the
override produces.

A field that was not given means "the base policy's value". Overrides dump
only the fields given, so a policy that travels as a workflow input decodes to
the same overrides (a dumped ``null`` would override with null).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import GenericAlias
from typing import Annotated, Any, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    create_model,
    model_serializer,
    model_validator,
)

NOT_PER_POOL = ("pools", "version", "triggers", "disruption")
"""Top-level keys an override may not hold: overrides do not nest, the version is the
file's, the triggers (watcher, receiver) read their section for the whole fleet, and the
disruption budgets are fleet-wide semaphores with one per-pool cap for every pool."""


def deep_merge(base: Mapping[Any, Any], override: Mapping[Any, Any]) -> dict[Any, Any]:
    """Return ``base`` with ``override`` merged in (mappings recursively, others replaced)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class PartialModel(BaseModel):
    """Base of the generated partial models: unknown keys are errors, only given fields dump."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if key in self.model_fields_set}

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # Logs and errors show what the override sets, not a screen of None.
        for key, value in super().__repr_args__():
            if key in self.model_fields_set:
                yield key, value


class PolicyOverrideBase(PartialModel):
    """Base of the generated ``PolicyOverride``: refuses the keys that are not per pool."""

    @model_validator(mode="before")
    @classmethod
    def _not_per_pool(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in NOT_PER_POOL:
                if key in data:
                    raise ValueError(f"{key!r} cannot be overridden per pool")
        return data


class PoolOverrideError(ValueError):
    """A pool's override that produces an invalid policy.

    Attributes:
        pool: The pool whose override is invalid.
        error: The effective policy's validation error (paths inside the policy).
    """

    def __init__(self, pool: str, error: ValidationError) -> None:
        self.pool = pool
        self.error = error
        problems = []
        for e in error.errors(include_url=False):
            message = e["msg"].removeprefix("Value error, ")
            path = ".".join(str(part) for part in e["loc"])
            problems.append(f"{path}: {message}" if path else message)
        super().__init__(f"pools.{pool}: {'; '.join(problems)}")


_PARTIALS: dict[type[BaseModel], type[PartialModel]] = {}


def _partial_annotation(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _partial_section(annotation)
    if get_origin(annotation) is dict:
        key, value = get_args(annotation)
        if isinstance(value, type) and issubclass(value, BaseModel):
            # rungs and fault_classes: one entry's field overridden keeps its others.
            return GenericAlias(dict, (key, _partial_section(value)))
    return annotation


def _partial_section(model: type[BaseModel]) -> type[PartialModel]:
    if model not in _PARTIALS:
        _PARTIALS[model] = partial_model(model)
    return _PARTIALS[model]


def partial_model(
    model: type[BaseModel],
    *,
    base: type[PartialModel] = PartialModel,
    exclude: tuple[str, ...] = (),
    name: str | None = None,
) -> type[PartialModel]:
    """Return a model of ``model``'s shape whose every field is optional and unset by default.

    Nested models (also as the values of a mapping) become partial models
    themselves; each field keeps its type, validators and bounds. Checks
    across fields (``model``'s own model validators) are not copied: they
    hold for the policy an override produces, not for the override.

    Args:
        model: The model to mirror.
        base: The generated model's base class.
        exclude: Fields of ``model`` the partial model does not have.
        name: The generated model's name (default: ``model``'s name + "Override").
    """
    fields: dict[str, Any] = {}
    for field, info in model.model_fields.items():
        if field in exclude:
            continue
        annotation = _partial_annotation(info.annotation)
        if info.metadata:  # the Duration parser and bounds such as ge/le
            annotation = Annotated[(annotation, *info.metadata)]
        # None is the unset default; a null given checks against the effective policy.
        fields[field] = (annotation | None, Field(default=None, description=info.description))
    partial: type[PartialModel] = create_model(
        name or f"{model.__name__}Override",
        __base__=base,
        __doc__=f"{model.__name__}'s fields, each optional (part of a pool's override).",
        __module__=__name__,
        **fields,
    )
    return partial
