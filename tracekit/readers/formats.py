"""The input formats tracekit reads, by name (a light module: naming a format
costs no import of a reader)."""

CAPTURE_FORMATS = ("pcap", "pcapng")
LOG_FORMATS = ("jsonl", "csv", "qlog", "queqiao", "queqiaobench", "queqiao-tsv", "prometheus",
               "har", "otlp")
# logs that may carry no time of their own (`--time` dates them)
TIMELESS = ("queqiaobench", "queqiao-tsv", "prometheus")
INPUT_FORMATS = ("auto", *CAPTURE_FORMATS, *LOG_FORMATS)
