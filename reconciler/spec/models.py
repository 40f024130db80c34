"""The spec language: pydantic models of one lineage spec, its units and rules.

No I/O except one check: a ``replay`` folder must exist (relative to the
spec file's folder, given as the validation context ``{"base_dir": Path}``) and be
one a spec may read (``reconciler.spec.places``).
Positions are the loader's business (``reconciler.spec.load``); these models only
say *which field* is wrong and *why*, in words a user can act on.

Every model forbids unknown keys (a typo must not pass silently) and is
strict (no silent ``"5"`` -> 5); the unit types below parse sizes, durations
and money explicitly. Defaults equal the original instrument's
(``reconciler.kernel.base.config``).
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from reconciler.kernel.base import config as kc
from reconciler.kernel.base import registry
from reconciler.kernel.base.identity import is_object_id
from reconciler.spec import places, prices, units
from reconciler.spec import probes as probe_specs

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
    "json_schema",
]

API_VERSION = "ouro/v1"
KIND = "Lineage"
SET_KIND = "LineageSet"
MAX_REPLICAS = 10_000  # a member's index is at most 4 digits (reconciler.spec.sets)

# The providers, from their one record each (``reconciler.kernel.base.registry``), and
# ``recorded``: the control plane's own, another lineage's recorded replies served by the
# kernel's replay provider from a folder ouro fills (``reconciler.engine.recorded``).
RECORDED = "recorded"
Provider = Literal[registry.ProviderName, "recorded"]
_OFFLINE = (*kc.OFFLINE_PROVIDERS, RECORDED)  # no server, no key, no price
Enforcement = Literal["auto", "systemd", "cgroup2", "cgroup1"]
PAID_PROVIDERS = registry.PAID_PROVIDERS
DEFAULT_API_KEY_ENV: dict[str, str | None] = registry.DEFAULT_KEY_ENV

# Upper bounds: beyond them a value is a typo, and the kernel's cgroup and tmpfs
# files (signed 64-bit) could not hold it anyway.
MAX_BYTES = (1 << 63) - 1
MAX_SECONDS = 366 * 86400
MAX_TASKS = 4194304  # the kernel's PID_MAX_LIMIT
MAX_COUNT = 1_000_000_000
MAX_GENERATIONS = 1_000_000

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODEL_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")
# For editors: an http(s) URL with a host, no credentials, query, fragment or whitespace
# (the validator, urlsplit, rules).
_URL = re.compile(
    r"^[Hh][Tt][Tt][Pp][Ss]?://(\[[0-9A-Fa-f:.]+\]|[^\s/?#@:\[\]]+)"
    r"(:[0-9]*)?(/[^\s?#]*)?$"
)


# --- unit types ------------------------------------------------------------------

Size = Annotated[
    int,
    BeforeValidator(units.parse_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": units.SIZE_PATTERN},
            ],
            "description": "bytes, or K/M/G/T (= KiB/MiB/GiB/TiB, powers of 1024)",
        }
    ),
]
Duration = Annotated[
    int,
    BeforeValidator(units.parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": units.DURATION_PATTERN},
            ],
            "description": "whole seconds, or e.g. 600s, 10m, 1h, 1h30m",
        }
    ),
]
Money = Annotated[
    Decimal,
    BeforeValidator(units.parse_money),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": units.MONEY_PATTERN},
                {"type": "integer", "minimum": 0},
            ],
            "description": 'USD as a quoted decimal string, e.g. "1.00" (never a float)',
        }
    ),
]


def _to_path(value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"a path is a non-empty string, not {units.describe(value)}")
    if "\x00" in value:
        raise ValueError("a path cannot contain a NUL character")
    try:
        return Path(value).expanduser()
    except RuntimeError as error:  # "~nobody/x": no such user
        raise ValueError(f"cannot expand {value!r}: {error}") from error


PathText = Annotated[
    Path,
    BeforeValidator(_to_path),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": r"^[^\x00]*[^\x00\s][^\x00]*$"}),
]


def branch_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid git branch name (``git check-ref-format --branch``), or None."""
    if not name:
        return "a branch name cannot be empty"
    if name == "@":
        return "a branch name cannot be '@'"
    if name == "HEAD":
        return "a branch cannot be called HEAD"
    if name.startswith("-"):
        return "a branch name cannot start with '-'"
    if name.startswith("/") or name.endswith("/"):
        return "a branch name cannot start or end with '/'"
    if name.endswith("."):
        return "a branch name cannot end with '.'"
    if ".." in name:
        return "a branch name cannot contain '..'"
    if "@{" in name:
        return "a branch name cannot contain '@{'"
    for char in name:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return "a branch name cannot contain control characters"
        if char in " ~^:?*[\\":
            return f"a branch name cannot contain {char!r}"
    for component in name.split("/"):
        if not component:
            return "a branch name cannot contain '//' (an empty component)"
        if component.startswith("."):
            return f"a branch name component cannot start with '.' ({component!r})"
        if component.endswith(".lock"):
            return f"a branch name component cannot end with '.lock' ({component!r})"
    return None


def _branch(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"a branch name is a string, not {units.describe(value)}")
    problem = branch_name_problem(value)
    if problem:
        raise ValueError(f"{value!r} is not a valid git branch name: {problem}")
    return value


# branch_name_problem's rules for editors (the function is the authority; a test feeds both).
_BRANCH_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "pattern": r"^[^\x00-\x20\x7f~^:?*\[\\]+$",
    "not": {
        "anyOf": [
            {"enum": ["@", "HEAD"]},
            {"pattern": r"^-"},
            {"pattern": r"^/|/$"},
            {"pattern": r"\.$"},
            {"pattern": r"\.\."},
            {"pattern": r"@\{"},
            {"pattern": r"//"},
            {"pattern": r"(^|/)\."},
            {"pattern": r"\.lock(/|$)"},
        ]
    },
}
BranchName = Annotated[
    str | None,
    BeforeValidator(_branch),
    WithJsonSchema({"anyOf": [_BRANCH_SCHEMA, {"type": "null"}]}),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- the models -------------------------------------------------------------------


class Metadata(_Strict):
    name: str = Field(
        description="lowercase letters, digits and '-' (a DNS label, at most 63 characters); "
        "unique among the specs of one run",
        json_schema_extra={"pattern": _DNS_LABEL.pattern},
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="free-form string labels, shown by plan and status",
        json_schema_extra={"propertyNames": {"pattern": _LABEL_KEY.pattern}},
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(
                f"{value!r} is not a valid lineage name: use 1-63 lowercase letters, digits "
                "and '-', not starting or ending with '-' (e.g. gpt-03)"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _LABEL_KEY.match(key):
                raise ValueError(
                    f"label key {key!r}: use 1-63 letters, digits, '-', '_', '.', '/', "
                    "starting and ending with a letter or digit"
                )
        return value


class PriceSpec(_Strict):
    input_usd_per_mtok: Money = Field(description="USD per million prompt tokens")
    output_usd_per_mtok: Money = Field(description="USD per million output tokens")

    def to_price(self) -> kc.Price:
        return kc.Price(self.input_usd_per_mtok, self.output_usd_per_mtok)


def _model_name_schema(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # the default depends on the provider
    schema["pattern"] = r"^(?=[^\x00-\x1f\x7f]*\S)[^\x00-\x1f\x7f]{1,200}$"


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


class ModelSpec(_Strict):
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
        json_schema_extra={"pattern": _URL.pattern},
    )
    api_key_env: str | None = Field(
        default=None,
        validate_default=True,
        description="environment variable holding the API key; defaults: ANTHROPIC_API_KEY "
        "(anthropic), OPENAI_API_KEY (openai), null (openai-compatible: a keyless local "
        "server); replay and echo take none",
        json_schema_extra={"pattern": _ENV_NAME.pattern},
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
        json_schema_extra={"pattern": _DNS_LABEL.pattern},
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
        if not _MODEL_NAME.match(value) or not value.strip():
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
        if value is not None and not _ENV_NAME.match(value):
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
        if value is not None and not _DNS_LABEL.match(value):
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


class CeilingsSpec(_Strict):
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

    @field_validator("cpu")
    @classmethod
    def _cpu_share(cls, value: int, info: ValidationInfo) -> int:
        wall = info.data.get("wall")
        if isinstance(wall, int) and value * 100 < wall:
            raise ValueError(
                f"cpu {units.format_duration(value)} is less than 1% of wall "
                f"{units.format_duration(wall)}: the quota cpu / wall must be at least 1%"
            )
        return value


# sbatch options ouro sets itself for each job (an extra option may not override them).
RESERVED_SBATCH_OPTIONS = frozenset(
    {"time", "partition", "account", "cpus-per-task", "mem", "signal", "output", "error",
     "job-name", "array", "wrap", "open-mode", "requeue", "no-requeue"}
)
_SBATCH_OPTION = re.compile(r"^--([a-z][a-z0-9-]*)(=[^\x00-\x1f\x7f]*)?$")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,128}$")


def sbatch_option(text: str) -> tuple[str, str | bool]:
    """``--name=value`` or ``--flag`` -> (name, value or True); ValueError says what is wrong."""
    match = _SBATCH_OPTION.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not an sbatch option: write --name=value or --flag (e.g. --qos=low, "
            "--constraint=skylake), one per item"
        )
    name = match.group(1)
    if name in RESERVED_SBATCH_OPTIONS:
        raise ValueError(
            f"--{name} is set by ouro itself: use the executor's own fields (partition, "
            "account, time, cpus, memory) instead"
        )
    value = match.group(2)
    return name, True if value is None else value[1:]


def _slurm_name(value: str | None) -> str | None:
    if value is not None and not _SLURM_NAME.match(value):
        raise ValueError(f"{value!r} is not a Slurm partition or account name")
    return value


def _sbatch_item(value: str) -> str:
    sbatch_option(value)
    return value


SbatchOption = Annotated[str, AfterValidator(_sbatch_item)]


class SlurmSpec(_Strict):
    partition: str | None = Field(
        default=None, description="the partition (default: the cluster's)"
    )
    account: str | None = Field(default=None, description="the account to charge (default: yours)")
    time: Duration = Field(
        default=3600,
        ge=60,
        le=MAX_SECONDS,
        description="time limit of one job; a job starts no generation that could not end "
        "(wall ceiling) before it, and is requeued for the rest",
    )
    cpus: int = Field(default=1, ge=1, le=4096, description="CPUs per job (--cpus-per-task)")
    memory: Size | None = Field(
        default=None, ge=1 << 20, le=MAX_BYTES, description="memory per job (--mem); "
        "default: the cluster's"
    )
    sbatch: list[SbatchOption] = Field(
        default_factory=list,
        description="extra sbatch options, one per item: --name=value or --flag",
    )

    @field_validator("partition", "account")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return _slurm_name(value)



class ExecutorSpec(_Strict):
    slurm: SlurmSpec = Field(
        default_factory=SlurmSpec, description="jobs for `ouro apply --executor slurm`"
    )


class StorageSpec(_Strict):
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


class InstrumentSpec(_Strict):
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


class ForkSpec(_Strict):
    """``spec.from``: the lineage is born as a fork of another lineage's generation."""

    lineage: str = Field(
        description="the parent lineage's name (a spec of this run, else <state dir>/NAME)",
        json_schema_extra={"pattern": _DNS_LABEL.pattern},
    )
    generation: int = Field(
        ge=1, le=MAX_GENERATIONS,
        description="the parent's generation whose committed tree is the seed (not a death)")
    kernel: Literal["running", "parent"] = Field(
        default="running",
        description="running: born under this ouro's kernel (new physics); parent: under "
        "the parent's pinned kernel (a replay with identical physics)")

    @field_validator("lineage")
    @classmethod
    def _parent_name(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a lineage name (1-63 lowercase letters, "
                             "digits and '-'): name the parent lineage, e.g. scribe")
        return value


class LineageBody(_Strict):
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


class LineageSpec(_Strict):
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


class LineageSetBody(_Strict):
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


class LineageSetSpec(_Strict):
    """A set of lineages: ``apiVersion: ouro/v1``, ``kind: LineageSet``."""

    api_version: Literal["ouro/v1"] = Field(alias="apiVersion")
    kind: Literal["LineageSet"]
    metadata: Metadata
    spec: LineageSetBody

    @property
    def name(self) -> str:
        return self.metadata.name


_POSITIVE = {
    units.SIZE_PATTERN: units.POSITIVE_SIZE_PATTERN,
    units.DURATION_PATTERN: units.POSITIVE_DURATION_PATTERN,
}


def _unit_bounds(model: type[BaseModel], properties: dict[str, Any]) -> None:
    """A unit field's ``ge``/``le`` into its schema: the integer branch's minimum and
    maximum, and for ``ge >= 1`` the string pattern that refuses zero. (The largest
    string, e.g. ``99999999T``, is beyond what a pattern can bound: ouro refuses it.)"""
    for name, info in model.model_fields.items():
        schema = properties.get(info.alias or name)
        if not isinstance(schema, dict) or "anyOf" not in schema:
            continue
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
        branches = [b for b in schema["anyOf"] if isinstance(b, dict)]
        for branch in branches:
            if branch.get("type") == "integer":
                if low is not None:
                    branch["minimum"] = low
                if high is not None:
                    branch["maximum"] = high
            elif branch.get("pattern") in _POSITIVE and low is not None and low >= 1:
                branch["pattern"] = _POSITIVE[branch["pattern"]]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one spec document (what ``ouro schema`` prints): the models'
    own schema, with every unit field's bounds (see ``_unit_bounds``)."""
    schema = LineageSpec.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.get("$defs", {})
    for model in (LineageSpec, Metadata, LineageBody, ModelSpec, PriceSpec, CeilingsSpec,
                  StorageSpec, InstrumentSpec, probe_specs.ProbeCeilingsSpec):
        target = schema if model is LineageSpec else definitions.get(model.__name__, {})
        _unit_bounds(model, target.get("properties", {}))
    _with_sets(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _with_sets(schema: dict[str, Any]) -> None:
    """Both kinds in one schema: the same four fields, ``spec`` chosen by ``kind`` (oneOf).

    A set's template is LineageBody's schema with nothing required (a matrix key may
    supply any field); its values are checked per member by the loader."""
    definitions = schema.setdefault("$defs", {})
    body = schema["properties"]["spec"]
    template = {k: v for k, v in definitions["LineageBody"].items() if k != "required"}
    template["title"] = "LineageTemplate"
    definitions["LineageTemplate"] = template
    definitions["LineageSetBody"] = {
        "additionalProperties": False,
        "description": LineageSetBody.__doc__.split("\n")[0] if LineageSetBody.__doc__ else "",
        "properties": {
            "replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS,
                         "default": 1, "description": "members per matrix cell"},
            "matrix": {"type": "object", "default": {},
                       "propertyNames": {"pattern": r"^[a-z_]+(\.[a-z_]+)*$"},
                       "additionalProperties": {"type": "array", "minItems": 1},
                       "description": "spec field paths to the values they take"},
            "template": {"$ref": "#/$defs/LineageTemplate"},
        },
        "required": ["template"],
        "title": "LineageSetBody",
        "type": "object",
    }
    schema["properties"]["kind"] = {"enum": [KIND, SET_KIND], "title": "Kind", "type": "string"}
    schema["properties"]["spec"] = {"description": "by kind: a LineageBody or a LineageSetBody"}
    schema["oneOf"] = [
        {"properties": {"kind": {"const": KIND}, "spec": body}},
        {"properties": {"kind": {"const": SET_KIND},
                        "spec": {"$ref": "#/$defs/LineageSetBody"}}},
    ]
