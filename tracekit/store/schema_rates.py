"""Columns of derived tables described beside schema.py (which is at the size
limit of a module), as (name, SQL type, meaning): schema.py makes them
Columns and lists them in DERIVED like its own."""

# Derived by `tracekit analyze` (tracekit/pipeline/steps/bottleneck.py, whose
# docstring holds the definitions): the bottleneck rate per flow direction.
BOTTLENECK = (
    ("capture_id", "INTEGER NOT NULL", "Capture"),
    ("flow_id", "BIGINT NOT NULL", "TCP flow"),
    ("direction", "VARCHAR NOT NULL", "Data direction: `c2s` or `s2c`"),
    ("side", "VARCHAR NOT NULL", "`arrivals`: pairs of full-sized data segments as they arrived (a capture near the receiver); `acks`: pairs of the ACKs that newly acknowledge the direction's data (near the sender); elsewhere the slower of the two"),
    ("pairs", "BIGINT", "The side's pairs with a positive gap"),
    ("modal_pairs", "BIGINT", "Pairs within 10 % of the mode (the fastest local peak of 5 %-wide rate bins supported by at least 30 pairs and a tenth of them)"),
    ("rate_bps", "BIGINT", "The median rate of the modal pairs (IP bits/s: the second's IP bytes / the gap)"),
    ("p25_bps", "BIGINT", "Their first quartile"),
    ("p75_bps", "BIGINT", "Their third quartile"),
    ("confidence", "DOUBLE", "modal_pairs / pairs, rounded to 3 places"),
    ("known", "BOOLEAN", "At least 30 modal pairs, confidence >= 0.25 and (arrivals) no 5 of the first 10 full-sized segments arrived more than 4 x faster than the mode, unless 3 or more of their pairs came at the mode (a token bucket's burst)"),
)
