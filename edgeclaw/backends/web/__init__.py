"""The web backend: every HTTP request a tool makes to an address a model chose goes through here.

`guard` decides where a request may go: the address ranges a board must not reach unasked
(loopback, the LAN, link-local and cloud metadata, ...) in every IPv4 and IPv6 spelling, what the
owner allowed, which ports, the resolver seam and the proxy from the environment. `client` is the
one request path (`fetch`): connections only to addresses the guard vetted, keeping the Host
header and the TLS name; redirects re-checked; bodies streamed, decompressed within bounds and cut
at a cap.
"""
