"""TLS 1.3 records of one TCP connection decrypted with its key log (NSS
format, SSLKEYLOGFILE), for `tracekit h2-events --keylog`: the application's
byte stream of each direction, each byte timed by when the record holding
it had wholly arrived (a record is opened only whole).

RFC 8446: traffic keys from a secret by HKDF-Expand-Label ("key", "iv"),
each record's nonce the iv XOR its sequence number, the record header the
AEAD's associated data, the plaintext's last non-zero byte its real content
type. A direction's first encrypted records use its handshake secret, the
rest its first application secret (the switch is found by which key opens
the record). TLS 1.2, key updates and 0-RTT data are not read: a record no
key opens ends that direction's stream there.
"""

import struct

import numpy as np

from ..core.errors import TracekitError

SUITES = {0x1301: ("sha256", 16), 0x1302: ("sha384", 32), 0x1303: ("sha256", 32)}
LABELS = {True: ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0"),
          False: ("SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0")}


def read_keylog(path):
    """{(label, client random): secret} of an NSS key log."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) == 3 and not line.startswith("#"):
                try:
                    out[(parts[0], bytes.fromhex(parts[1]))] = bytes.fromhex(parts[2])
                except ValueError:
                    raise TracekitError(f"{path}: line {n} is not a key log line") from None
    return out


def _expand_label(secret, label, length, hash_name):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
    full = b"tls13 " + label
    info = struct.pack(">HB", length, len(full)) + full + b"\x00"
    algorithm = hashes.SHA256() if hash_name == "sha256" else hashes.SHA384()
    return HKDFExpand(algorithm, length, info).derive(secret)


class UndecryptableRecord(ValueError):
    """A record neither secret of the key log opens (its byte offset in the
    direction's TCP byte stream is args[0])."""


class _Key:
    def __init__(self, secret, suite):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
        hash_name, key_len = SUITES[suite]
        key = _expand_label(secret, b"key", key_len, hash_name)
        self.iv = _expand_label(secret, b"iv", 12, hash_name)
        self.aead = ChaCha20Poly1305(key) if suite == 0x1303 else AESGCM(key)
        self.seq = 0

    def open(self, header, body):
        from cryptography.exceptions import InvalidTag
        nonce = bytes(a ^ b for a, b in zip(self.iv, self.seq.to_bytes(12, "big")))
        try:
            plain = self.aead.decrypt(nonce, body, header)
        except InvalidTag:
            return None
        self.seq += 1
        return plain


def records(data, contiguous):
    """(start, type, header, body) of each whole record in data[:contiguous]."""
    at = 0
    while at + 5 <= contiguous:
        typ, _version, n = struct.unpack(">BHH", data[at:at + 5])
        if at + 5 + n > contiguous:
            return
        yield at, typ, data[at:at + 5], data[at + 5:at + 5 + n]
        at += 5 + n


def hello(data, contiguous, client):
    """The ClientHello's random (client) or the ServerHello's cipher suite."""
    for _, typ, _, body in records(data, contiguous):
        if typ != 22 or len(body) < 38:
            continue
        if client and body[0] == 1:
            return bytes(body[6:38])
        if not client and body[0] == 2:
            sid = body[38]
            return struct.unpack(">H", body[39 + sid:41 + sid])[0]
    return None


def plaintext(data, seen, contiguous, secrets, suite):
    """(application bytes, time per byte, their length): each record's
    application data, every byte timed by the record's last byte."""
    keys = [_Key(s, suite) for s in secrets if s is not None]
    out, times = bytearray(), []
    for start, typ, header, body in records(data, contiguous):
        if typ != 23:
            continue
        plain = None
        while keys and plain is None:
            plain = keys[0].open(header, body)
            if plain is None:
                keys.pop(0)  # the handshake key is done: the application key's turn
        if plain is None:
            raise UndecryptableRecord(start)
        plain = plain.rstrip(b"\x00")
        if plain[-1:] == b"\x17":
            out += plain[:-1]
            times.append(np.full(len(plain) - 1, seen[start:start + 5 + len(body)].max(), np.int64))
    stamp = np.concatenate(times) if times else np.zeros(0, np.int64)
    return bytes(out), stamp, len(out)
