"""How much of the internet a set of CIDRs opens SSH to.

Checking each CIDR for /0 alone misses `[0.0.0.0/1, 128.0.0.0/1]`, which together are the whole
IPv4 internet. The share counted here is of the globally routable space only: private, shared
(CGNAT), loopback, link-local, multicast and reserved blocks reach nobody from the internet, so
`10.0.0.0/8` opens nothing while `0.0.0.0/1` opens about half of it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Net = ipaddress.IPv4Network | ipaddress.IPv6Network

# IANA special-purpose registries (RFC 6890 and successors): blocks no internet host is in.
NOT_ROUTED_V4 = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/3",  # multicast 224/4 and reserved 240/4
    )
)
# IPv6: only 2000::/3 is allocated as global unicast; the documentation block is inside it.
GLOBAL_V6 = ipaddress.ip_network("2000::/3")
DOCUMENTATION_V6 = ipaddress.ip_network("2001:db8::/32")


def _size(nets: Iterable[Net]) -> int:
    return sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))


def _overlap(a: Iterable[Net], b: Iterable[Net]) -> int:
    """Addresses in both collapsed sets (each set's blocks are disjoint after collapsing)."""
    out = 0
    bs = list(ipaddress.collapse_addresses(b))
    for x in ipaddress.collapse_addresses(a):
        for y in bs:
            if x.overlaps(y):
                out += min(x.num_addresses, y.num_addresses)  # CIDRs nest or are disjoint
    return out


def public_share(cidrs: Iterable[str]) -> float:
    """The largest share (0..1) of the routable IPv4 or IPv6 internet the CIDRs cover together."""
    nets = [ipaddress.ip_network(c) for c in cidrs]
    v4 = [n for n in nets if n.version == 4]
    v6 = [n for n in nets if n.version == 6]
    routed_v4 = 2**32 - _size(NOT_ROUTED_V4)
    share4 = (_size(v4) - _overlap(v4, NOT_ROUTED_V4)) / routed_v4 if v4 else 0.0
    routed_v6 = GLOBAL_V6.num_addresses - DOCUMENTATION_V6.num_addresses
    share6 = (
        (_overlap(v6, [GLOBAL_V6]) - _overlap(v6, [DOCUMENTATION_V6])) / routed_v6 if v6 else 0.0
    )
    return max(share4, share6)
