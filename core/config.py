"""One configuration for every process: defaults in conf/pipeline.toml, then an optional site
file, then WAKU_<SECTION>__<KEY> environment variables, then --set section.key=value.

Every key must exist in the defaults; a value from the environment or the command line is
converted to the type of its default, and anything that does not fit raises ConfigError with a
one-line message naming the key, the bad value and where it came from.
"""
from __future__ import annotations

import argparse
import copy
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT_ENV = "WAKU_REPO_ROOT"


def _repo_root() -> Path:
    """The checkout. On a cluster's driver the packages are imported from the zip tools/submit.py
    ships with --py-files (spark-submit puts it first on sys.path), which holds no conf/: then the
    checkout is the one spark-submit.sh runs from (WAKU_REPO_ROOT, set by tools/submit.py)."""
    here = Path(__file__).resolve().parent.parent
    if here.is_dir():
        return here
    return Path(os.environ.get(REPO_ROOT_ENV) or os.getcwd()).resolve()


REPO_ROOT = _repo_root()
DEFAULTS_PATH = REPO_ROOT / "conf" / "pipeline.toml"
ENV_PREFIX = "WAKU_"
CONFIG_FILE_ENV = "WAKU_CONFIG"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is one line for the user."""


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _convert(raw: str, default: Any, key: str, origin: str) -> Any:
    """Convert a string from env / command line to the type of the key's default."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key}: expected {expected}, got {raw!r} (from {origin})")

    if isinstance(default, bool):
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise bad("a boolean (true/false)")
    if isinstance(default, int):
        try:
            return int(raw.strip())
        except ValueError:
            raise bad("an integer") from None
    if isinstance(default, float):
        try:
            value = float(raw.strip())
        except ValueError:
            raise bad("a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise bad("a finite number")
        return value
    if isinstance(default, list):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def _check_type(value: Any, default: Any, key: str, origin: str) -> Any:
    """Values from a TOML file must already have the default's type (ints pass as floats)."""
    if isinstance(default, bool) != isinstance(value, bool):
        raise ConfigError(f"{key}: expected {type(default).__name__}, got {value!r} (from {origin})")
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(default)):
        raise ConfigError(f"{key}: expected {type(default).__name__}, got {value!r} (from {origin})")
    return value


def _merge_file(base: dict[str, dict[str, Any]], extra: Mapping[str, Any], origin: str) -> None:
    for section, values in extra.items():
        if section not in base or not isinstance(values, Mapping):
            raise ConfigError(f"unknown config section [{section}] (from {origin})")
        for key, value in values.items():
            full = f"{section}.{key}"
            if key not in base[section]:
                raise ConfigError(f"unknown config key {full} (from {origin})")
            base[section][key] = _check_type(value, base[section][key], full, origin)


def _set(base: dict[str, dict[str, Any]], full: str, raw: str, origin: str) -> None:
    section, _, key = full.partition(".")
    if section not in base or key not in base[section]:
        raise ConfigError(f"unknown config key {full!r} (from {origin})")
    base[section][key] = _convert(raw, base[section][key], full, origin)


@dataclass(frozen=True)
class Config:
    """The merged configuration; `config["kafka"]["port"]` or `config.get("kafka.port")`."""

    values: Mapping[str, Mapping[str, Any]]

    def __getitem__(self, section: str) -> Mapping[str, Any]:
        return self.values[section]

    def get(self, dotted: str) -> Any:
        section, _, key = dotted.partition(".")
        return self.values[section][key]

    def path(self, dotted: str) -> str:
        """A path setting made absolute against the repo root; URIs (s3a://...) pass through."""
        value = str(self.get(dotted))
        if "://" in value or value.startswith("/"):
            return value
        return str(REPO_ROOT / value)

    def uses_embedded_kafka(self) -> bool:
        return not self.get("kafka.bootstrap_servers").strip()

    def bootstrap_servers(self) -> str:
        if self.uses_embedded_kafka():
            ek = self["embedded_kafka"]
            return f"{ek['host']}:{ek['port']}"
        servers: str = self.get("kafka.bootstrap_servers")
        return servers.strip()

    def kafka_client_options(self) -> dict[str, str]:
        """The Java client's names (as Spark takes them); core/kafka.py gives each Python client
        its own form. A `sasl.jaas.config` without a username and password is refused here."""
        from core.kafka import jaas_credentials

        options = _pairs(self.get("kafka.client_options"), "kafka.client_options")
        if "sasl.jaas.config" in options:
            try:
                jaas_credentials(options["sasl.jaas.config"])
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        return options

    def spark_options(self) -> dict[str, str]:
        return _pairs(self.get("spark.options"), "spark.options")

    def table_path(self, table: str) -> str:
        return f"{self.path('warehouse.root').rstrip('/')}/{table}"

    def checkpoint_path(self, job: str) -> str:
        return f"{self.path('warehouse.checkpoints').rstrip('/')}/{job}"

    def push_topic(self, bridge_id: str) -> str:
        return f"{self.get('topics.push_prefix')}{bridge_id}"


def _pairs(items: Sequence[str], key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{key}: expected key=value items, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def load_config(
    overrides: Sequence[str] = (),
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Merge defaults, site file, environment and `section.key=value` overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, dict[str, Any]] = copy.deepcopy(_load_toml(DEFAULTS_PATH))
    site = config_file or env.get(CONFIG_FILE_ENV)
    if site:
        _merge_file(values, _load_toml(Path(site)), site)
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name or name == CONFIG_FILE_ENV:
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("__")
        _set(values, f"{section}.{key}", raw, f"environment {name}")
    for item in overrides:
        full, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        _set(values, full.strip(), raw, f"--set {item}")
    _validate(values)
    return Config(values)


def _validate(values: Mapping[str, Mapping[str, Any]]) -> None:
    for key in ("embedded_kafka.port", "embedded_kafka.controller_port"):
        section, _, name = key.partition(".")
        port = values[section][name]
        if not 1 <= port <= 65535:
            raise ConfigError(f"{key}: expected a port 1-65535, got {port}")
    for key in ("messages_partitions", "subscriptions_partitions", "push_partitions"):
        if values["topics"][key] < 1:
            raise ConfigError(f"topics.{key}: expected at least 1, got {values['topics'][key]}")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The two options every entry point takes."""
    parser.add_argument("--config", metavar="FILE", help="site TOML file layered over conf/pipeline.toml")
    parser.add_argument(
        "--set", metavar="SECTION.KEY=VALUE", action="append", default=[], dest="overrides",
        help="override one setting (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(args.overrides, args.config)
