// Which of this machine's addresses its peers can reach it at.
#pragma once

#include <cstdint>
#include <string>

namespace elastic::trainer {

// The local IPv4 address the kernel would send from to reach host:port (a
// numeric IPv4 address or a resolvable name): the address of the interface on
// the route to it. Workers on the head's network are reachable from each
// other at the address they reach the head from, so this is what a worker
// advertises for its collectives. Nothing is sent (a UDP socket is only
// connected). Throws std::runtime_error naming host:port when there is no
// route to it or the name does not resolve.
std::string SourceAddressToward(const std::string& host, uint16_t port);

}  // namespace elastic::trainer
