"""What the transport did, reconstructed from the packets of the store.

Sequential state machines (Wireshark's sequence analysis, tracekit's own
segment classification) run here as kernels over one capture's TCP packets
in frame order; the SQL files of analyses/ build the rest on their output.
"""
