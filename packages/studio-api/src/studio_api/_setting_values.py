"""The value checks behind ``StudioSettings``: each takes one raw setting and returns it
normalised, or raises ``ValueError`` with the message the operator sees beside the variable."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import re
import zoneinfo
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from studio_outbox import InvalidWebhookSecret, parse_webhook_secret

logger = logging.getLogger("studio_api")

_COMMAND_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_zone(name: str) -> bool:
    """Whether ``name`` is a time zone this machine knows."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def system_timezone_name() -> str:
    """The host's IANA zone: ``TZ``, else ``/etc/localtime``, else ``/etc/timezone``, else UTC."""
    candidates: list[str] = []
    tz = os.environ.get("TZ", "").strip().lstrip(":")
    if tz:
        candidates.append(tz)
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        target = ""
    marker = "zoneinfo/"
    if marker in target:
        candidates.append(target.split(marker, 1)[1])
    with contextlib.suppress(OSError):
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    for name in candidates:
        if name and is_zone(name):
            return name
    return "UTC"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


POSTGRES_SCHEMES = ("postgresql", "postgres")
"""URL schemes of a PostgreSQL database target."""


def is_postgres_url(value: object) -> bool:
    """Whether ``value`` is a ``postgresql://`` / ``postgres://`` URL (not a file path)."""
    from studio_state import is_postgres

    return isinstance(value, str) and is_postgres(value.strip())


def postgres_url(text: str) -> str:
    """A PostgreSQL URL, checked for what libpq would refuse (``ValueError`` saying what)."""
    url = text.strip()
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ValueError("a PostgreSQL URL must not contain spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme.lower() not in POSTGRES_SCHEMES:
        raise ValueError("must be a postgresql:// URL")
    if parts.fragment:
        raise ValueError("a PostgreSQL URL has no #fragment")
    if "," not in parts.netloc:  # several hosts ("h1:5432,h2:5432") are libpq's to check
        try:
            port = parts.port
        except ValueError:
            raise ValueError("the URL's port must be a number from 1 to 65535") from None
        if port == 0:
            raise ValueError("the URL's port must be a number from 1 to 65535")
    if parts.path.strip("/").count("/"):
        raise ValueError(
            "the URL's path must be one database name (postgresql://user@host:5432/dbname)"
        )
    return url


def shown_target(db: Path | str) -> str:
    """The database as a log line may show it: the file, or the URL's host, port and database
    (never its user, password or parameters)."""
    if isinstance(db, Path):
        return str(db)
    parts = urlsplit(db)
    host = parts.netloc.rpartition("@")[2] or "localhost"
    return f"{parts.scheme}://{host}{parts.path}"


def redact_url(url: str) -> str:
    """``url`` with its password (``user:secret@``, ``password=``) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that cannot be parsed>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{hosts}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def db_path(value: Any) -> Any:
    """The database: a SQLite file path, absolute with ``~`` expanded (never empty or
    ``:memory:``), or a ``postgresql://`` URL kept as a string."""
    if isinstance(value, str | Path):
        text = str(value).strip()
        if not text:
            raise ValueError("must be a file path or a postgresql:// URL, not empty")
        if text == ":memory:":
            raise ValueError("must be a file path (an in-memory database cannot be shared)")
        if isinstance(value, str) and is_postgres_url(text):
            return postgres_url(text)
        if "://" in text:
            scheme = text.split("://", 1)[0]
            raise ValueError(
                f"{scheme}:// is not a database Studio opens: give a SQLite file path "
                "or a postgresql:// URL"
            )
        return Path(text).expanduser().absolute()
    return value


def node_id(value: str | None) -> str | None:
    """A node's name (``None``: ``hostname:pid``), as ``studio_state.check_node_id`` checks."""
    from studio_state import InvalidSetting, check_node_id

    if value is None:
        return None
    try:
        return check_node_id(value.strip())
    except InvalidSetting as exc:
        raise ValueError(str(exc).removeprefix("node_id ")) from None


def host_name(value: str) -> str:
    """The bind host, stripped (no whitespace inside)."""
    host = value.strip()
    if not host or any(ch.isspace() for ch in host):
        raise ValueError("must be a host name or IP address")
    return host


def printable_token(value: SecretStr | None) -> SecretStr | None:
    """A bearer or GitHub token: printable ASCII without spaces."""
    if value is None:
        return None
    secret = value.get_secret_value()
    if not secret.isascii() or not secret.isprintable() or " " in secret:
        raise ValueError("must be printable ASCII without spaces")
    return value


def webhook_secret(value: SecretStr | None) -> SecretStr | None:
    """A Standard Webhooks signing secret, as the outbox parses it."""
    if value is None:
        return None
    try:
        parse_webhook_secret(value.get_secret_value(), field="LIONAGI_STUDIO_WEBHOOK_SECRET")
    except InvalidWebhookSecret as exc:
        raise ValueError(str(exc).partition(": ")[2]) from None
    return value


def zone_name(value: str) -> str:
    """An IANA zone name; empty means the host's zone, an unknown one falls back to UTC."""
    name = value.strip()
    if not name:
        return system_timezone_name()
    if not is_zone(name):
        logger.warning("LIONAGI_SCHEDULER_TZ=%r is not a known IANA time zone; using UTC", name)
        return "UTC"
    return name


def directory(value: str | None) -> str | None:
    """An absolute directory path (a warning, not an error, while it does not exist)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ValueError("must be an absolute directory path")
    if not path.is_dir():
        logger.warning(
            "LIONAGI_SCHEDULER_CWD=%s is not a directory now; it is used only once it is",
            path,
        )
    return str(path)


def project_paths(value: Any) -> Any:
    """Registered projects: a JSON object of project name to absolute directory path (the
    working directory of a schedule that names the project and no ``action_cwd``)."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError('must be a JSON object such as {"web": "/srv/web"}') from None
    if not isinstance(value, dict):
        raise ValueError('must be a JSON object such as {"web": "/srv/web"}')
    projects: dict[str, str] = {}
    for name, path in value.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError("project names must be non-empty strings")
        if not isinstance(path, str) or not Path(path).expanduser().is_absolute():
            raise ValueError(f"project {name!r}: the path must be an absolute directory path")
        projects[name] = str(Path(path).expanduser())
    return projects


def command_names(value: Any) -> Any:
    """The command allow-list: comma-separated bare command names."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if isinstance(value, list | tuple):
        names = tuple(str(part).strip() for part in value if str(part).strip())
        for name in names:
            if not _COMMAND_NAME.fullmatch(name) or name.startswith("-"):
                raise ValueError(
                    f"{name!r} is not a bare command name (letters, digits, '_', '.', '-'; "
                    "comma separated)"
                )
        return names
    return value


def synchronous_level(value: Any) -> Any:
    """``full`` or ``normal``."""
    from studio_state import InvalidSetting, check_synchronous

    if not isinstance(value, str):
        return value
    try:
        return check_synchronous(value)
    except InvalidSetting:
        raise ValueError("must be 'full' or 'normal'") from None


def env_names(value: Any) -> Any:
    """Comma-separated environment variable names."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if isinstance(value, list | tuple):
        names = tuple(str(part).strip() for part in value if str(part).strip())
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not an environment variable name (comma separated names)"
                )
        return names
    return value


def li_path(value: str | None) -> str | None:
    """The absolute path of an executable ``li``."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ValueError("must be an absolute path to the li executable")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ValueError(f"{path} is not an executable file")
    return str(path)


def notify_template(value: Any) -> Any:
    """The notify argv template: a JSON list of strings starting with the program."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError(
                'must be a JSON list of strings, e.g. ["notify-send", "{payload}"]'
            ) from None
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError('must be a JSON list of strings, e.g. ["notify-send", "{payload}"]')
    if not value or not value[0].strip():
        raise ValueError("must start with the program to run")
    return tuple(value)


def node_url(value: str | None) -> str | None:
    """This node's API base URL for other nodes: http(s)://host[:port], no path or query."""
    if value is None or not value.strip():
        return None
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ValueError("must be an http(s) URL such as http://10.0.0.5:8765")
    if parts.path or parts.username or parts.password:
        raise ValueError("must be the API's base URL (scheme, host and port only)")
    return url


def github_url(value: str) -> str:
    """The GitHub API base URL: http(s), without a trailing slash."""
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http(s) URL such as https://api.github.com")
    return url


def archive_dir(value: str | None) -> str | None:
    """An absolute path, a directory or not yet there (retention creates it)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ValueError("must be an absolute directory path")
    if path.exists() and not path.is_dir():
        raise ValueError("exists and is not a directory")
    return str(path)
