"""Exact TLS handshake timings with the session keys: tshark decrypts.

tls.py reads what TLS leaves in the clear; in TLS 1.3 that ends at the
ServerHello, so the client's Finished is inferred (its first encrypted
record). With an SSLKEYLOGFILE (NSS key log format, written by browsers,
curl, OpenSSL's SSL_CTX_set_keylog_callback and Python's
SSLContext.keylog_filename), tshark decrypts the records and names every
handshake message. This module runs tshark once over the capture with the
key log and stores, per decrypted handshake message, its frame, time and
flow in `tls_decrypted`; handshakes.sql then takes the client's Finished
and the first application data from there (timing_source `decrypted`).
tshark must be installed; pyshark is not needed (tshark's field output is
read directly, which is what pyshark would drive).
"""

import os
import shutil
import subprocess

from ...core.errors import TracekitError
from .tls import HANDSHAKE

FIELDS = ["frame.number", "tls.handshake.type", "tls.record.content_type", "tls.app_data"]


def tshark_messages(capture_path, keylog_path):
    """[(frame, [handshake types], [record content types], carries app data)] from tshark."""
    tshark = shutil.which("tshark")
    if not tshark:
        raise TracekitError("decrypting TLS needs tshark (Debian: apt-get install tshark)")
    for path in (capture_path, keylog_path):
        if not os.path.exists(path):
            raise TracekitError(f"{path}: no such file")
    cmd = [tshark, "-n", "-r", capture_path, "-o", f"tls.keylog_file:{keylog_path}",
           "-o", "tcp.desegment_tcp_streams:TRUE", "-Y", "tls", "-T", "fields",
           "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise TracekitError(f"tshark failed on {capture_path}: {r.stderr.strip().splitlines()[-1:]}")
    out = []
    for line in r.stdout.splitlines():
        cols = line.split("\t") + [""] * len(FIELDS)
        frame = int(cols[0])
        types = [int(t) for t in cols[1].split(",") if t]
        content = [int(t) for t in cols[2].split(",") if t]
        out.append((frame, types, content, bool(cols[3])))
    return out


def load_keys(con, capture_id, keylog_path):
    """Decrypt capture `capture_id` with `keylog_path`; replace its tls_decrypted rows."""
    rows = con.execute("SELECT path FROM captures WHERE capture_id = ?", [capture_id]).fetchall()
    if not rows:
        raise TracekitError(f"no capture {capture_id} in the store (see tracekit captures)")
    messages = tshark_messages(rows[0][0], keylog_path)
    frames = dict((f, (flow, fc, ts)) for f, flow, fc, ts in con.execute(
        "SELECT frame, flow_id, from_client, ts_ns FROM packets WHERE capture_id = ? "
        "AND frame IN (SELECT unnest(?::BIGINT[]))",
        [capture_id, [m[0] for m in messages]]).fetchall())
    records = []
    for frame, types, content, app_data in messages:
        if frame not in frames or frames[frame][0] is None:
            continue
        flow, from_client, ts = frames[frame]
        direction = "c2s" if from_client else "s2c"
        for t in types:
            records.append((capture_id, flow, direction, frame, ts,
                            HANDSHAKE.get(t, f"handshake_{t}")))
        # decrypted application data; a record tshark reassembled from several
        # segments shows its data without the inner content type
        if 23 in content or (app_data and not types and not content):
            records.append((capture_id, flow, direction, frame, ts, "application_data"))
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM tls_decrypted WHERE capture_id = ?", [capture_id])
        if records:
            con.executemany("INSERT INTO tls_decrypted VALUES (?, ?, ?, ?, ?, ?)", records)
        # handshakes.sql reads this table: rebuild that capture's handshakes
        con.execute("DELETE FROM analysis_runs WHERE capture_id = ? AND analysis = 'handshakes'",
                    [capture_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(records)

