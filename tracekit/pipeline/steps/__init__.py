"""The analyze steps that are code, not SQL: each a module that declares
TABLES (what it writes), READS and SCOPE, and builds its tables with
compiled kernels (tracekit.kernels) or vectorised code where SQL expresses
the question badly. tracekit.pipeline.dag orders them among the SQL steps.

- sequence: Wireshark's sequence analysis and tracekit's segment classes
  per TCP packet (tcp_analysis), flights and request/response exchanges;
- tls: TLS handshake messages from the stored payloads;
- stalls: the limitation state of every instant of a flow direction;
- bottleneck: the bottleneck rate per flow direction, from pairs of segments
  or ACKs found in one pass (DuckDB reduces them);
- phases: per request, its instants and the stall runs inside it.
"""

from . import bottleneck, phases, sequence, stalls, tls

CODE_STEPS = (sequence, tls, stalls, bottleneck, phases)
