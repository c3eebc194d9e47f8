// Which local interface reaches a host: Gloo must bind the address that routes to MASTER_ADDR
// so multi-host runs need no GLOO_SOCKET_IFNAME.
#pragma once
#include <string>

namespace distrun {

/// The local IP address the kernel would use to reach `host` (resolved by name), e.g.
/// "127.0.0.1" for localhost. Throws ConfigError when `host` does not resolve or route.
std::string local_address_towards(const std::string& host);

/// True when `addr` (an IP literal) is assigned to an interface of this host.
bool is_local_address(const std::string& addr);

/// The name of the interface that holds `addr` (an IP literal), e.g. "lo" for 127.0.0.1; empty
/// when no interface of this host has it.
std::string interface_with_address(const std::string& addr);

/// The first IPv4/IPv6 address of `host` as a literal; ConfigError when it does not resolve.
std::string resolve_host(const std::string& host);

}  // namespace distrun
