"""The web search's only HTTP client: GET one URL without letting it reach inside the network.

Every hop (the first request and each redirect) is checked before it is sent:
- http or https only, no user name or password in the URL;
- every address the host resolves to is public (not loopback, private, link-local, multicast,
  reserved), unless the host is on the deployment's allow list (`WEB_FETCH_ALLOW_HOSTS`);
- the connection goes to the address that was checked, so a second DNS answer cannot swap
  in an inside address between the check and the request;
- the domain passes the allow and deny lists.
A response is read only up to its byte cap, within a connect, a read and a total timeout,
uncompressed (no Accept-Encoding is sent, and a compressed answer is refused), and only if
its content type is one the caller accepts.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urljoin, urlsplit

REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "agentic-rag-web/1.0 (+search evidence fetcher)"
_CHUNK = 64 * 1024

Resolve = Callable[[str, int], list[str]]


class WebError(Exception):
    """A request that was refused or failed; str(e) says why, for a warning the user reads."""


class Refused(WebError):
    """The URL, an address it resolves to, or the response is not allowed."""


@dataclass(frozen=True)
class FetchPolicy:
    """What one fetch may reach and read."""

    allow_hosts: tuple[str, ...] = ()  # inside hosts or networks ("127.0.0.1", "10.0.0.0/8", "searxng")
    allow_domains: tuple[str, ...] = ()  # empty: any domain the deny list leaves
    deny_domains: tuple[str, ...] = ()
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    max_bytes: int = 2_000_000
    max_redirects: int = 3
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 5.0
    total_timeout_s: float = 8.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    status: int
    content_type: str  # the media type alone, lower case
    charset: str
    body: bytes

    def text(self) -> str:
        return self.body.decode(self.charset or "utf-8", errors="replace")


def fetch(url: str, policy: FetchPolicy, *, resolve: Resolve | None = None) -> Fetched:
    """GET url under policy, following checked redirects; raise WebError when refused or failed."""
    deadline = time.monotonic() + policy.total_timeout_s
    seen: set[str] = set()
    for _ in range(policy.max_redirects + 1):
        if url in seen:
            raise Refused(f"redirect loop at {url}")
        seen.add(url)
        target = check_url(url, policy, resolve=resolve or resolve_host)
        response, connection, sock = _request(target, policy, deadline)
        try:
            if response.status in REDIRECTS and response.getheader("Location"):
                url = _redirect_target(url, response.getheader("Location", ""))
                continue
            return _read(url, response, sock, policy, deadline)
        finally:
            connection.close()
    raise Refused(f"more than {policy.max_redirects} redirects")


def _redirect_target(url: str, location: str) -> str:
    try:
        return urljoin(url, location.strip())
    except ValueError as error:
        raise Refused(f"{url[:200]} redirects to a bad URL") from error


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    address: str  # the checked address the connection goes to
    path: str  # path and query, as sent


def check_url(url: str, policy: FetchPolicy, *, resolve: Resolve) -> Target:
    """The URL's checked connection target; Refused when anything about it is not allowed."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:  # "http://[", "http://a:99999"
        raise Refused(f"not a URL: {url[:200]}") from error
    if parts.scheme not in ("http", "https"):
        raise Refused(f"only http and https are fetched, not {parts.scheme or 'a relative URL'}: {url[:200]}")
    if parts.username or parts.password:
        raise Refused("a URL with a user name or password is not fetched")
    try:  # a name in another script is sent as its ASCII (IDNA) form, as a Host header must be
        host = (parts.hostname or "").rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError as error:
        raise Refused(f"bad host name in {url[:200]}") from error
    if not host:
        raise Refused(f"no host in {url[:200]}")
    port = port or (443 if parts.scheme == "https" else 80)
    if not is_domain_allowed(host, policy.allow_domains, policy.deny_domains):
        raise Refused(f"{host} is not on the allowed domains, or is denied")
    addresses = resolve(host, port)
    if not addresses:
        raise WebError(f"{host} does not resolve")
    inside = [a for a in addresses if not is_public(a)]
    if inside and not is_host_allowed(host, addresses, policy.allow_hosts):
        raise Refused(f"{host} resolves to a non-public address ({inside[0]}): refused")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # A request line is ASCII: other characters are percent-encoded, escapes kept as they are.
    return Target(parts.scheme, host, port, addresses[0], quote(path, safe="/%?=&;:@!$'()*+,~-._[]"))


def resolve_host(host: str, port: int) -> list[str]:
    """Every address host resolves to (an IP literal resolves to itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise WebError(f"{host} does not resolve: {error}") from error
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public(address: str) -> bool:
    """Whether address is a public unicast address (an IPv4-mapped IPv6 one is read as IPv4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def is_host_allowed(host: str, addresses: Sequence[str], allowed: Sequence[str]) -> bool:
    """Whether the deployment allows this inside host: by name, or every address by network."""
    networks = []
    for entry in allowed:
        entry = entry.strip().lower().rstrip(".")
        if entry == host:
            return True
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    return bool(networks) and all(any(ipaddress.ip_address(a.split("%", 1)[0]) in n for n in networks) for a in addresses)


def is_domain_allowed(host: str, allow: Sequence[str], deny: Sequence[str]) -> bool:
    """Deny wins; an empty allow list allows every other domain. "example.com" covers its subdomains."""
    if any(_within(host, domain) for domain in deny):
        return False
    return not allow or any(_within(host, domain) for domain in allow)


def _within(host: str, domain: str) -> bool:
    domain = domain.strip().lower().lstrip("*.").rstrip(".")
    return bool(domain) and (host == domain or host.endswith("." + domain))


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address, whatever the host name resolves to now."""

    def __init__(self, target: Target, connect_s: float) -> None:
        super().__init__(target.host, target.port, timeout=connect_s)
        self.address = target.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, target: Target, connect_s: float) -> None:
        super().__init__(target.host, target.port, timeout=connect_s, context=ssl.create_default_context())
        self.address = target.address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _request(
    target: Target, policy: FetchPolicy, deadline: float
) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection, socket.socket]:
    """Send the GET; the socket is returned apart, since the connection lets go of it once the
    response says it will close."""
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, min(policy.connect_timeout_s, _left(deadline)))
    headers = {"User-Agent": USER_AGENT, "Accept": ", ".join(policy.content_types), **policy.headers}
    try:
        connection.connect()
        sock = connection.sock
        sock.settimeout(min(policy.read_timeout_s, _left(deadline)))
        connection.request("GET", target.path, headers=headers)
        return connection.getresponse(), connection, sock
    except TimeoutError as error:
        connection.close()
        raise WebError(f"{target.host} did not answer in time") from error
    except (OSError, http.client.HTTPException) as error:
        connection.close()
        raise WebError(f"{target.host}: {type(error).__name__}: {error}") from error


def _read(
    url: str, response: http.client.HTTPResponse, sock: socket.socket, policy: FetchPolicy, deadline: float
) -> Fetched:
    if response.status >= 400:
        raise WebError(f"{url[:200]} answered HTTP {response.status}")
    media, charset = _content_type(response.getheader("Content-Type", ""))
    if response.getheader("Content-Encoding", "identity").lower() not in ("", "identity"):
        raise Refused(f"{url[:200]} sent a compressed response that was not asked for")
    if media not in policy.content_types:
        raise Refused(f"{url[:200]} is {media or 'of no declared type'}, not {' or '.join(policy.content_types)}")
    declared = response.getheader("Content-Length", "")
    if declared.isdigit() and int(declared) > policy.max_bytes:
        raise Refused(f"{url[:200]} is {int(declared):,} bytes, over the {policy.max_bytes:,}-byte cap")
    body = _read_capped(response, sock, policy, deadline, url)
    if b"\x00" in body[:4096]:
        raise Refused(f"{url[:200]} is binary content")
    return Fetched(url, response.status, media, charset, body)


def _read_capped(
    response: http.client.HTTPResponse, sock: socket.socket, policy: FetchPolicy, deadline: float, url: str
) -> bytes:
    """The body, a piece at a time, each read given what is left of the total time."""
    pieces: list[bytes] = []
    size = 0
    try:
        while True:
            sock.settimeout(min(policy.read_timeout_s, _left(deadline)))
            piece = response.read1(_CHUNK)
            if not piece:
                return b"".join(pieces)
            size += len(piece)
            if size > policy.max_bytes:
                raise Refused(f"{url[:200]} is over the {policy.max_bytes:,}-byte cap")
            pieces.append(piece)
    except TimeoutError as error:
        raise WebError(f"{url[:200]} did not finish in time") from error
    except (OSError, http.client.HTTPException) as error:
        raise WebError(f"{url[:200]}: {type(error).__name__}: {error}") from error


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WebError("the web search ran out of time")
    return left


def _content_type(header: str) -> tuple[str, str]:
    media, _, params = header.partition(";")
    charset = ""
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset":
            charset = value.strip().strip('"')
    try:
        "".encode(charset or "utf-8")
    except LookupError:
        charset = ""
    return media.strip().lower(), charset
