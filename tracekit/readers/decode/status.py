"""Why a packet was not decoded through its transport header.

A packet is never dropped: it is stored with one of these codes in
`packets.decode_status` (NULL when it decoded completely) and the ingest
summary counts them. Codes are small integers inside the decoders and
strings in the store.
"""

OK = 0
STATUS = (
    None,                      # 0: decoded through the transport header
    "link_type_unsupported",   # 1: tracekit does not decode this link type
    "no_such_interface",       # 2: pcapng packet names an undescribed interface
    "truncated_link",          # 3: captured bytes end inside the link header
    "not_ip",                  # 4: link layer carries something other than IP (ARP, LLDP...)
    "truncated_ip",            # 5: captured bytes end inside the IP header
    "bad_ip_header",           # 6: IP version/header length impossible
    "ip_fragment",             # 7: a non-first IP fragment (no transport header in it)
    "ipv6_extension_limit",    # 8: more IPv6 extension headers than tracekit walks
    "truncated_tcp",           # 9: captured bytes end inside the TCP header
    "bad_tcp_header",          # 10: TCP data offset < 5 or beyond the IP payload
    "bad_tcp_options",         # 11: a TCP option length that runs past the header
    "truncated_udp",           # 12: captured bytes end inside the UDP header
    "bad_udp_length",          # 13: UDP length < 8 or beyond the IP payload
    "timestamp_out_of_range",  # 14: the record's time does not fit int64 ns (ts_ns NULL)
)
CODE = {name: i for i, name in enumerate(STATUS) if name}
