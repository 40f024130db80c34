"""The spec language: pydantic models of one lineage spec, its units and rules.

No I/O except one check: a ``replay`` folder must exist (relative to the
spec file's folder, given as the validation context ``{"base_dir": Path}``) and be
one a spec may read (``reconciler.spec.places``).
Positions are the loader's business (``reconciler.spec.load``); these models only
say *which field* is wrong and *why*, in words a user can act on.

Every model forbids unknown keys (a typo must not pass silently) and is
strict (no silent ``"5"`` -> 5); the unit types (``reconciler.spec.fieldtypes``)
parse sizes, durations and money explicitly, and every name is matched whole
against its pattern (``reconciler.spec.names``). Defaults equal the original instrument's
(``reconciler.kernel.base.config``).
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from reconciler.kernel.base import config as kc
from reconciler.kernel.base import registry
from reconciler.kernel.base.identity import is_object_id
from reconciler.spec import places, prices, units
from reconciler.spec import probes as probe_specs
from reconciler.spec.fieldtypes import (
    MAX_BYTES,
    MAX_GENERATIONS,
    MAX_REPLICAS,
    MAX_SECONDS,
    BranchName,
    Duration,
    Money,
    PathText,
    Size,
    Strict,
    branch_name_problem,
    cpu_share,
)
from reconciler.spec.fork_model import ForkSpec
from reconciler.spec.names import (
    DNS_LABEL,
    ENV_NAME,
    LABEL_KEY,
    LABEL_VALUE,
    MODEL_NAME,
    URL,
    whole,
)
from reconciler.spec.selection import SelectionSpec
from reconciler.spec.slurm import ExecutorSpec, SlurmSpec

__all__ = [
    "API_VERSION",
    "DEFAULT_API_KEY_ENV",
    "KIND",
    "MAX_REPLICAS",
    "PAID_PROVIDERS",
    "RECORDED",
    "SET_KIND",
    "CeilingsSpec",
    "ExecutorSpec",
    "ForkSpec",
    "InstrumentSpec",
    "LineageBody",
    "LineageSetBody",
    "LineageSetSpec",
    "LineageSpec",
    "Metadata",
    "ModelSpec",
    "PriceSpec",
    "SlurmSpec",
    "StorageSpec",
    "branch_name_problem",
]

API_VERSION = "ouro/v1"
KIND = "Lineage"
SET_KIND = "LineageSet"
MAX_TASKS = 4194304  # the kernel's PID_MAX_LIMIT
MAX_COUNT = 1_000_000_000

# The providers, from their one record each (``reconciler.kernel.base.registry``), and
# ``recorded``: the control plane's own, another lineage's recorded replies served by the
# kernel's replay provider from a folder ouro fills (``reconciler.engine.recorded``).
RECORDED = "recorded"
Provider = Literal[registry.ProviderName, "recorded"]
_OFFLINE = (*kc.OFFLINE_PROVIDERS, RECORDED)  # no server, no key, no price
Enforcement = Literal["auto", "systemd", "cgroup2", "cgroup1"]
PAID_PROVIDERS = registry.PAID_PROVIDERS
DEFAULT_API_KEY_ENV: dict[str, str | None] = registry.DEFAULT_KEY_ENV

# --- the models -------------------------------------------------------------------


class Metadata(Strict):
    name: str = Field(
        description="lowercase letters, digits and '-' (a DNS label, at most 63 characters); "
        "unique among the specs of one run",
        json_schema_extra={"pattern": DNS_LABEL.pattern},
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="free-form string labels, shown by plan and status",
        json_schema_extra={"propertyNames": {"pattern": LABEL_KEY.pattern},
                           "additionalProperties": {"type": "string",
                                                    "pattern": LABEL_VALUE.pattern}},
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not whole(DNS_LABEL, value):
            raise ValueError(
                f"{value!r} is not a valid lineage name: use 1-63 lowercase letters, digits "
                "and '-', not starting or ending with '-' (e.g. gpt-03)"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not whole(LABEL_KEY, key):
                raise ValueError(
                    f"label key {key!r}: use 1-63 letters, digits, '-', '_', '.', '/', "
                    "starting and ending with a letter or digit"
                )
            if isinstance(text, str) and not whole(LABEL_VALUE, text):
                raise ValueError(
                    f"label {key!r}: a value is one line of at most 256 characters, without "
                    "control characters or line breaks"
                )
        return value


class PriceSpec(Strict):
    input_usd_per_mtok: Money = Field(description="USD per million prompt tokens")
    output_usd_per_mtok: Money = Field(description="USD per million output tokens")

    def to_price(self) -> kc.Price:
        return kc.Price(self.input_usd_per_mtok, self.output_usd_per_mtok)


def _model_name_schema(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # the default depends on the provider
    schema["pattern"] = (r"^(?=[^\x00-\x1f\x7f-\x9f\u2028\u2029]*\S)"
                         r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,200}$")


def _when(
    provider: str | list[str], then: dict[str, Any], otherwise: dict[str, Any] | None = None
) -> dict[str, Any]:
    names = [provider] if isinstance(provider, str) else provider
    match = {"const": names[0]} if len(names) == 1 else {"enum": names}
    rule: dict[str, Any] = {
        "if": {"properties": {"provider": match}, "required": ["provider"]},
        "then": then,
    }
    if otherwise is not None:
        rule["else"] = otherwise
    return rule


_NULL = {"type": "null"}
# The provider rules, for editors (the validators of ModelSpec below are the authority).
_PROVIDER_RULES: list[Any] = [
    _when(list(registry.BASE_URL_REQUIRED), {"required": ["name", "base_url", "price"]}),
    _when(list(kc.OFFLINE_PROVIDERS), {"properties": {"base_url": _NULL}}),
    _when([p for p in registry.PROVIDERS if p not in registry.STORING_PROVIDERS],
          {"properties": {"store": _NULL}}),
    _when("replay", {"required": ["replay"]}, {"properties": {"replay": _NULL}}),
    _when(RECORDED, {"required": ["lineage"]}, {"properties": {"lineage": _NULL}}),
    _when(list(_OFFLINE), {"properties": {"price": _NULL, "api_key_env": _NULL,
                                          "base_url": _NULL}}),
    _when(
        list(PAID_PROVIDERS),
        {
            "properties": {
                "budget_usd": {
                    "anyOf": [
                        {"type": "string", "pattern": units.POSITIVE_MONEY_PATTERN},
                        {"type": "integer", "minimum": 1},
                    ]
                }
            }
        },
    ),
    *(
        _when(
            provider,
            {
                "anyOf": [
                    {"required": ["name", "price"]},
                    {"required": ["name"], "properties": {"name": {"enum": sorted(known)}}},
                ],
                "properties": {"api_key_env": {"type": "string"}},
            },
        )
        for provider, known in sorted(prices.KNOWN_PRICES.items())
    ),
]


class ModelSpec(Strict):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, json_schema_extra={"allOf": _PROVIDER_RULES}
    )

    provider: Provider = Field(
        description="anthropic | openai | openai-compatible | replay | echo | recorded")
    name: str = Field(
        default="",
        validate_default=True,
        description="the provider's model name; required for anthropic, openai and "
        "openai-compatible; for replay and echo it defaults to the provider's name",
        json_schema_extra=_model_name_schema,
    )
    base_url: str | None = Field(
        default=None,
        validate_default=True,
        description="the API base URL: required for openai-compatible (e.g. "
        "http://127.0.0.1:11434/v1); optional for openai (default https://api.openai.com/v1) "
        "and anthropic (default https://api.anthropic.com): gateways, proxies, test servers",
        json_schema_extra={"pattern": URL.pattern},
    )
    api_key_env: str | None = Field(
        default=None,
        validate_default=True,
        description="environment variable holding the API key; defaults: ANTHROPIC_API_KEY "
        "(anthropic), OPENAI_API_KEY (openai), null (openai-compatible: a keyless local "
        "server); replay and echo take none",
        json_schema_extra={"pattern": ENV_NAME.pattern},
    )
    replay: PathText | None = Field(
        default=None,
        validate_default=True,
        description="replay only, and required there: a folder of response files (every "
        "non-hidden file, in name order), relative to the spec file's folder",
    )
    lineage: str | None = Field(
        default=None,
        validate_default=True,
        description="recorded only, and required there: the lineage whose recorded replies "
        "answer, in order, from its generation 1 (a fork: from the one after the fork point)",
        json_schema_extra={"pattern": DNS_LABEL.pattern},
    )
    max_output_tokens: int = Field(default=12000, ge=1, le=MAX_COUNT, description="per request")
    max_prompt_bytes: Size = Field(
        default=196608, ge=1, le=MAX_BYTES, description="per request, in bytes"
    )
    request_timeout: Duration = Field(default=600, ge=1, le=MAX_SECONDS, description="per request")
    budget_usd: Money = Field(
        default=Decimal("1.00"),
        validate_default=True,
        description="hard spending limit per generation (USD); > 0 for paid providers",
    )
    price: PriceSpec | None = Field(
        default=None,
        validate_default=True,
        description="USD per million tokens; required for models without a known price; "
        "not allowed for replay and echo (they cost nothing)",
    )

    store: bool | None = Field(
        default=None,
        description="openai only: ask the Responses API to store the response (default false: "
        "ouro sends store: false)",
    )
    max_failed_generations: int = Field(
        default=3,
        ge=1,
        le=MAX_GENERATIONS,
        description="apply stops a lineage after this many generations in a row whose every "
        "model call failed with a retryable error (a final error stops it at once)",
    )

    @model_validator(mode="before")
    @classmethod
    def _provider_defaults(cls, data: Any) -> Any:
        """Fill the per-provider defaults that depend on whether a key is present at all."""
        if isinstance(data, dict):
            provider = data.get("provider")
            if isinstance(provider, str) and provider in DEFAULT_API_KEY_ENV:
                data = dict(data)
                if "api_key_env" not in data:
                    data["api_key_env"] = DEFAULT_API_KEY_ENV[provider]
                if "name" not in data and provider in kc.OFFLINE_PROVIDERS:
                    data["name"] = provider
            elif provider == RECORDED and "name" not in data:
                data = {**data, "name": provider}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        provider = info.data.get("provider")
        if value == "" and provider in PAID_PROVIDERS:
            raise ValueError(f"required, but missing: provider {provider} needs the model's name")
        if value == "" and provider is None:
            return value  # the provider is wrong; that is the problem to report
        if not whole(MODEL_NAME, value) or not value.strip():
            raise ValueError("a model name is 1-200 printable characters")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider is None:
            return value
        if provider in _OFFLINE:
            if value is not None:
                raise ValueError(
                    f"provider {provider} reaches no server: remove base_url"
                )
            return value
        if value is None:
            if provider in registry.BASE_URL_REQUIRED:
                raise ValueError(
                    f"provider {provider} needs base_url, the server's API base, e.g. "
                    "http://127.0.0.1:11434/v1 (Ollama) or http://127.0.0.1:8000/v1 (vLLM)"
                )
            return value
        try:
            parts = urlsplit(value)
            host = parts.hostname
            parts.port  # noqa: B018 (raises for a port that is not a number)
        except ValueError as error:
            raise ValueError(f"{value!r} is not a URL: {error}") from error
        if parts.scheme not in ("http", "https") or not host or any(
                c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"{value!r} is not an http(s) URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(
                f"{value!r}: a base URL has no query, fragment or credentials (the key comes "
                "from api_key_env)"
            )
        return value.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env(cls, value: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider in _OFFLINE and value is not None:
            raise ValueError(f"provider {provider} uses no API key: remove api_key_env")
        if provider in registry.KEYED_PROVIDERS and value is None:
            raise ValueError(
                f"provider {provider} needs an API key: name the environment variable that "
                f"holds it (default {DEFAULT_API_KEY_ENV[provider]}), or leave the field out"
            )
        if value is not None and not whole(ENV_NAME, value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("replay")
    @classmethod
    def _replay(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        provider = info.data.get("provider")
        if provider is None:
            return value
        if provider != "replay":
            if value is not None:
                raise ValueError(f"replay is only for provider replay, not {provider}: remove it")
            return value
        if value is None:
            raise ValueError(
                "provider replay needs replay: a folder of response files, relative to the "
                "spec file's folder"
            )
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get("base_dir")
        folder = Path(
            os.path.normpath(value if value.is_absolute() or base is None else Path(base) / value)
        )
        try:
            exists, is_dir = folder.exists(), folder.is_dir()
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read the replay folder {str(folder)!r}: {error}") from error
        if not exists:
            raise ValueError(f"the replay folder {str(folder)!r} does not exist")
        if not is_dir:
            raise ValueError(f"{str(folder)!r} is not a folder")
        problem = places.replay_problem(folder, Path(base)) if base is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_serializer(mode="wrap")
    def _without_no_lineage(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A model that is not ``recorded`` dumps as before ``lineage`` existed: its spec's
        digest (in saved plans and every observation) stays the same."""
        dumped: dict[str, Any] = handler(self)
        if self.lineage is None:
            dumped.pop("lineage", None)
        return dumped

    @field_validator("lineage")
    @classmethod
    def _lineage(cls, value: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider is not None and provider != RECORDED and value is not None:
            raise ValueError(f"lineage is only for provider recorded, not {provider}: remove it")
        if provider == RECORDED and value is None:
            raise ValueError("provider recorded needs lineage: the name of the lineage whose "
                             "recorded replies answer")
        if value is not None and not whole(DNS_LABEL, value):
            raise ValueError(f"{value!r} is not a lineage name (lowercase letters, digits, '-')")
        return value

    @field_validator("store")
    @classmethod
    def _store(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        provider = info.data.get("provider")
        if (value is not None and provider is not None
                and provider not in registry.STORING_PROVIDERS):
            raise ValueError(f"store is only for provider "
                             f"{' or '.join(registry.STORING_PROVIDERS)} (Responses API), "
                             f"not {provider}")
        return value

    @field_validator("budget_usd")
    @classmethod
    def _budget(cls, value: Decimal, info: ValidationInfo) -> Decimal:
        provider = info.data.get("provider")
        if provider in PAID_PROVIDERS and value <= 0:
            raise ValueError(
                f"budget_usd must be more than 0 for provider {provider} (it is the most a "
                "generation may spend)"
            )
        return value

    @field_validator("price")
    @classmethod
    def _price(cls, value: PriceSpec | None, info: ValidationInfo) -> PriceSpec | None:
        provider, name = info.data.get("provider"), info.data.get("name")
        if provider is None:
            return value
        if provider in _OFFLINE:
            if value is not None:
                raise ValueError(f"provider {provider} costs nothing: remove price")
            return value
        if value is None and name is not None and prices.known_price(provider, name) is None:
            known = ", ".join(prices.known_models(provider)) or "none: a server states its own"
            raise ValueError(
                f"model {name!r} has no known price for provider {provider}: set price: "
                '{input_usd_per_mtok: "...", output_usd_per_mtok: "..."} '
                f"(known models: {known})"
            )
        return value

    def resolved_price(self) -> kc.Price:
        if self.provider == RECORDED:
            return kc.FREE
        if self.price is not None:
            return self.price.to_price()
        known = prices.known_price(self.provider, self.name)
        if known is None:  # validation makes this unreachable
            raise ValueError(f"model {self.name!r} has no price")
        return known


class CeilingsSpec(Strict):
    wall: Duration = Field(
        default=600, ge=1, le=MAX_SECONDS, description="wall-clock limit of one generation"
    )
    cpu: Duration = Field(
        default=120,
        ge=1,
        le=MAX_SECONDS * 1024,
        description="aggregate CPU seconds; enforced as a quota of cpu / wall (at least 1%)",
    )
    memory: Size = Field(
        default=1 << 30, ge=1, le=MAX_BYTES, description="memory limit (MemoryMax)"
    )
    swap: Size = Field(default=0, ge=0, le=MAX_BYTES, description="swap limit (MemorySwapMax)")
    tasks: int = Field(
        default=64, ge=1, le=MAX_TASKS, description="processes and threads (TasksMax)"
    )
    worktree: Size = Field(
        default=256 << 20, ge=1, le=MAX_BYTES, description="size of the /work tmpfs"
    )
    worktree_files: int = Field(
        default=10000, ge=1, le=MAX_COUNT, description="files a generation may publish"
    )
    tmp: Size = Field(default=64 << 20, ge=1, le=MAX_BYTES, description="size of the /tmp tmpfs")
    run: Size = Field(default=16 << 20, ge=1, le=MAX_BYTES, description="size of the /run tmpfs")
    enforcement: Enforcement = Field(
        default="auto", description="auto | systemd | cgroup2 | cgroup1"
    )
    model_requests: int = Field(
        default=256, ge=1, le=MAX_COUNT,
        description="requests to the model socket one generation may make; beyond, the "
        "broker answers 429 without asking the provider and only counts them",
    )
    model_audit: Size = Field(
        default=32 << 20, ge=1, le=MAX_BYTES,
        description="bytes of model-call records (prompts and replies) one generation may "
        "leave in its audit and observation; beyond, requests are answered 429 and counted",
    )

    _cpu_share = field_validator("cpu")(cpu_share)


class StorageSpec(Strict):
    path: PathText | None = Field(
        default=None,
        description="the lineage worktree; relative to the spec file's folder; "
        "default <state dir>/<name>",
    )
    git_dir: PathText | None = Field(default=None, description="default <path>.git")
    observations: PathText | None = Field(default=None, description="default <path>.observations")
    branch: BranchName = Field(
        default=None,
        description="default: the branch an existing lineage records; lineage-<name> for a birth",
    )
    observation_branch: BranchName = Field(
        default=None,
        description="default: the branch an existing lineage's observations record; "
        "observations/<branch> for a birth",
    )


class InstrumentSpec(Strict):
    commit: str | None = Field(
        default=None,
        description="optional pin: refuse to plan or apply unless this instrument is this "
        "commit (a full 40- or 64-hex id)",
        json_schema_extra={"pattern": r"^\s*([0-9a-fA-F]{40}|[0-9a-fA-F]{64})\s*$"},
    )

    @field_validator("commit")
    @classmethod
    def _full_id(cls, value: str | None) -> str | None:
        if value is None:
            return value
        lowered = value.strip().lower()
        if not is_object_id(lowered):
            raise ValueError(f"{value!r} is not a full 40- or 64-hex git commit id")
        return lowered


class LineageBody(Strict):
    generations: int = Field(
        ge=0, le=MAX_GENERATIONS, description="the desired TOTAL number of generations"
    )
    model: ModelSpec
    ceilings: CeilingsSpec = Field(default_factory=CeilingsSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    instrument: InstrumentSpec = Field(default_factory=InstrumentSpec)
    from_: ForkSpec | None = Field(
        default=None, alias="from",
        description="fork: born from another lineage's generation (docs/spec.md, Forks)")
    executor: ExecutorSpec = Field(
        default_factory=ExecutorSpec, description="where apply runs the generations (not physics)"
    )
    probes: list[probe_specs.ProbeSpec] = Field(
        default_factory=list, max_length=probe_specs.MAX_PROBES,
        description="measurements of every generation (not physics; docs/spec.md)")
    until: list[probe_specs.UntilSpec] = Field(
        default_factory=list, max_length=probe_specs.MAX_UNTIL,
        description="stop the lineage early when a probe's metric reaches a target or "
        "plateaus")
    suspend: bool = Field(
        default=False,
        description="pause the lineage: no generation starts (running ones finish); "
        "plan shows it suspended (not physics)")

    @model_serializer(mode="wrap")
    def _without_no_fork(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A lineage that is no fork dumps as before ``from`` existed: its spec digest (the
        canonical dump's sha256, in saved plans and every observation) stays the same."""
        dumped: dict[str, Any] = handler(self)
        if self.from_ is None:
            dumped.pop("from", None)
            dumped.pop("from_", None)
        return dumped

    @field_validator("probes")
    @classmethod
    def _probes(cls, value: list[probe_specs.ProbeSpec]) -> list[probe_specs.ProbeSpec]:
        return probe_specs.check_probes(value)

    @field_validator("until")
    @classmethod
    def _until(cls, value: list[probe_specs.UntilSpec],
               info: ValidationInfo) -> list[probe_specs.UntilSpec]:
        if "probes" not in info.data:  # the probes are wrong: that is the problem to show
            return value
        return probe_specs.check_until(value, info.data["probes"])


class LineageSpec(Strict):
    """One lineage: ``apiVersion: ouro/v1``, ``kind: Lineage``."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        title="ouro lineage spec (ouro/v1)",
        json_schema_extra={"$id": "https://ouro.invalid/schema/ouro-v1-lineage.json"},
    )

    api_version: Literal["ouro/v1"] = Field(alias="apiVersion")
    kind: Literal["Lineage"]
    metadata: Metadata
    spec: LineageBody

    @property
    def name(self) -> str:
        return self.metadata.name


class LineageSetBody(Strict):
    """A set's body: ``replicas`` x ``matrix`` members of ``template`` (reconciler.spec.sets).

    The template is checked as each member's Lineage spec, after the matrix has
    replaced the fields it names: its schema is LineageBody's with nothing required.
    """

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS,
                          description="members per matrix cell (indices 0..replicas-1)")
    matrix: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="spec field paths (e.g. model, ceilings.wall) to the values they take; "
        "one cell per combination",
    )
    template: dict[str, Any] = Field(
        description="a Lineage's spec; matrix keys replace the fields they name")
    selection: SelectionSpec | None = Field(
        default=None, description="opt-in selection among the members (docs/selection.md)")


class LineageSetSpec(Strict):
    """A set of lineages: ``apiVersion: ouro/v1``, ``kind: LineageSet``."""

    api_version: Literal["ouro/v1"] = Field(alias="apiVersion")
    kind: Literal["LineageSet"]
    metadata: Metadata
    spec: LineageSetBody

    @property
    def name(self) -> str:
        return self.metadata.name
