"""nwaku's RLN credentials keystore (`waku_keystore`), read and written as nwaku v0.38 does.

The file is one JSON object, compact, then a newline, mode 0600:

    {"application":"waku-rln-relay","appIdentifier":"01234567890abcdef","credentials":{KEY: KEYFILE, ...},
     "version":"0.2"}

KEY is the membership hash: SHA-256 over the UTF-8 of chainId + address + str(treeIndex)
concatenated as strings (chainId is decimal, as nwaku writes ``$UInt256``; the address is the
string the operator configured, its case kept), as UPPERCASE hex. KEYFILE is a Web3 Secret
Storage style entry without ``id`` and ``version``:

    {"crypto":{"cipher":"aes-128-ctr","cipherparams":{"iv":HEX16},"ciphertext":HEX,"kdf":"pbkdf2",
     "kdfparams":{"dklen":32,"c":1000000,"prf":"hmac-sha256","salt":HEX16},"mac":HEX32}}

The key is 32 bytes of PBKDF2-HMAC-SHA256 (nwaku's default, one million rounds, 16-byte salt)
or scrypt (read; nwaku writes it only when asked: N=262144, r=1, p=8); AES-128-CTR under its
first 16 bytes with a 16-byte IV as the whole initial counter; the MAC is Keccak-256 (not SHA3)
over key[16:32] + ciphertext. Hex is lowercase without 0x. The plaintext is the compact JSON of
the membership, the 32-byte values as arrays of byte integers:

    {"membershipContract":{"chainId":"59141","address":"0x..."},"treeIndex":7,
     "identityCredential":{"idTrapdoor":[..],"idNullifier":[..],"idSecretHash":[..],
     "idCommitment":[..]},"userMessageLimit":100}

Each error is one `KeystoreError` whose message is one line naming the file and what is wrong.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from typing import Any

from Crypto.Cipher import AES
from Crypto.Hash import keccak
from Crypto.Protocol.KDF import scrypt

log = logging.getLogger("ingest.rln.keystore")

# nwaku's RLNAppInfo (waku_rln_relay/constants.nim).
APPLICATION = "waku-rln-relay"
APP_IDENTIFIER = "01234567890abcdef"
VERSION = "0.2"

# nwaku's keyfile constants (waku_keystore/keyfile.nim).
PBKDF2_ITERATIONS = 1_000_000
SCRYPT_N = 262_144
SCRYPT_R = 1
SCRYPT_P = 8
DKLEN = 32
MAX_DKLEN = 128
SALT_SIZE = 16
IV_SIZE = 16
CIPHER = "aes-128-ctr"

CREDENTIAL_SIZE = 32
FILE_MODE = 0o600

# PBKDF2 PRFs hashlib computes; nwaku also names the keccak ones, which it never writes.
_PRFS = {f"hmac-{h}": h for h in ("sha224", "sha256", "sha384", "sha512",
                                  "sha3_224", "sha3_256", "sha3_384", "sha3_512")}


class KeystoreError(Exception):
    """What is wrong with an RLN keystore or the request made of it, in one line."""


@dataclass(frozen=True)
class MembershipCredential:
    """One RLN membership as nwaku keeps it (`KeystoreMembership`).

    The four identity values are 32 bytes each in the byte order nwaku stores them: zerokit's
    serialisation of a field element, little-endian. ``chain_id`` is a string as in nwaku's
    file (decimal when nwaku wrote it); an int given here becomes its decimal string.
    """

    id_trapdoor: bytes = field(repr=False)
    id_nullifier: bytes = field(repr=False)
    id_secret_hash: bytes = field(repr=False)
    id_commitment: bytes
    chain_id: str
    contract_address: str
    tree_index: int
    user_message_limit: int

    def __post_init__(self) -> None:
        chain: object = self.chain_id
        if isinstance(chain, int) and not isinstance(chain, bool):
            object.__setattr__(self, "chain_id", str(chain))
        elif not isinstance(chain, str):
            raise ValueError(f"chain_id must be a string or an int, not {type(chain).__name__}")
        for name in ("id_trapdoor", "id_nullifier", "id_secret_hash", "id_commitment"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != CREDENTIAL_SIZE:
                raise ValueError(f"{name} must be {CREDENTIAL_SIZE} bytes")
        if not isinstance(self.contract_address, str):
            raise ValueError("contract_address must be a string")
        for name in ("tree_index", "user_message_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int")

    @property
    def keystore_key(self) -> str:
        """The key nwaku files this credential under in the keystore's ``credentials``."""
        return membership_key(self.chain_id, self.contract_address, self.tree_index)

    def describe(self) -> str:
        """Where the membership is, for messages (no secrets)."""
        return f"chain {self.chain_id} contract {self.contract_address} index {self.tree_index}"


def membership_key(chain_id: str | int, contract_address: str, tree_index: int) -> str:
    """nwaku's `hash(KeystoreMembership)`: uppercase hex SHA-256 of chainId & address & $treeIndex."""
    text = f"{chain_id}{contract_address}{tree_index}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest().upper()


# --- the credential's plaintext ------------------------------------------------------------


def encode_credential(credential: MembershipCredential) -> bytes:
    """The plaintext nwaku encrypts: its JSON of the membership, fields in its order, compact."""
    doc = {
        "membershipContract": {"chainId": credential.chain_id, "address": credential.contract_address},
        "treeIndex": credential.tree_index,
        "identityCredential": {
            "idTrapdoor": list(credential.id_trapdoor),
            "idNullifier": list(credential.id_nullifier),
            "idSecretHash": list(credential.id_secret_hash),
            "idCommitment": list(credential.id_commitment),
        },
        "userMessageLimit": credential.user_message_limit,
    }
    return _compact(doc).encode("utf-8")


def decode_credential(plaintext: bytes) -> MembershipCredential:
    """The membership of a decrypted keyfile; ValueError saying what is missing or malformed."""
    try:
        doc = json.loads(plaintext.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"decrypted credential is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError("decrypted credential is not a JSON object")
    contract = _member(doc, "membershipContract", dict, "")
    identity = _member(doc, "identityCredential", dict, "")
    chain = _member(contract, "chainId", (str, int), "membershipContract.")
    values = {
        name: _byte_array(identity, key)
        for name, key in (("id_trapdoor", "idTrapdoor"), ("id_nullifier", "idNullifier"),
                          ("id_secret_hash", "idSecretHash"), ("id_commitment", "idCommitment"))
    }
    if "userMessageLimit" not in doc:
        raise ValueError("decrypted credential has no userMessageLimit (an RLN-v1 credential?)")
    return MembershipCredential(
        **values,
        chain_id=str(chain),
        contract_address=_member(contract, "address", str, "membershipContract."),
        tree_index=_unsigned(doc, "treeIndex"),
        user_message_limit=_unsigned(doc, "userMessageLimit"),
    )


def _member(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], prefix: str) -> Any:
    if key not in doc:
        raise ValueError(f"decrypted credential has no {prefix}{key}")
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"decrypted credential's {prefix}{key} is {_json_kind(value)}")
    return value


def _unsigned(doc: dict[str, Any], key: str) -> int:
    value = _member(doc, key, int, "")
    if value < 0:
        raise ValueError(f"decrypted credential's {key} is negative")
    return int(value)


def _byte_array(identity: dict[str, Any], key: str) -> bytes:
    value = _member(identity, key, list, "identityCredential.")
    if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value):
        raise ValueError(f"decrypted credential's identityCredential.{key} is not an array of bytes")
    if len(value) != CREDENTIAL_SIZE:
        raise ValueError(f"decrypted credential's identityCredential.{key} has {len(value)} bytes, "
                         f"not {CREDENTIAL_SIZE}")
    return bytes(value)


def _json_kind(value: object) -> str:
    """A JSON value's kind with its article: "a string", "an array"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _compact(doc: object) -> str:
    # nwaku's toUgly / `$`: no spaces, non-ASCII kept as UTF-8.
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


# --- one keyfile (keyfile.nim) -------------------------------------------------------------


class _Unopened(Exception):
    """A keyfile that cannot be opened: `reason` in words; `wrong_password` when the MAC differs."""

    def __init__(self, reason: str, *, wrong_password: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wrong_password = wrong_password


def encrypt_keyfile(
    secret: bytes,
    password: str,
    *,
    kdf: str = "pbkdf2",
    work_factor: int = 0,
    salt: bytes | None = None,
    iv: bytes | None = None,
) -> dict[str, Any]:
    """nwaku's `createKeyFileJson`: ``secret`` encrypted under ``password``.

    ``work_factor`` 0 takes nwaku's default (PBKDF2 rounds or scrypt N). ``salt`` and ``iv`` are
    random unless given (tests reproducing known vectors give them).
    """
    salt = secrets.token_bytes(SALT_SIZE) if salt is None else salt
    iv = secrets.token_bytes(IV_SIZE) if iv is None else iv
    if len(iv) != IV_SIZE:
        raise ValueError(f"iv must be {IV_SIZE} bytes")
    params: dict[str, Any]
    if kdf == "pbkdf2":
        rounds = work_factor or PBKDF2_ITERATIONS
        dkey = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, rounds, DKLEN)
        params = {"dklen": DKLEN, "c": rounds, "prf": "hmac-sha256", "salt": salt.hex()}
    elif kdf == "scrypt":
        n = work_factor or SCRYPT_N
        if n < 2 or n & (n - 1):
            raise ValueError(f"scrypt's n must be a power of 2, not {n}")
        dkey = _scrypt(password, salt, n, SCRYPT_R, SCRYPT_P)
        params = {"dklen": DKLEN, "n": n, "r": SCRYPT_R, "p": SCRYPT_P, "salt": salt.hex()}
    else:
        raise ValueError(f"kdf {kdf!r} is not one nwaku writes (pbkdf2, scrypt)")
    ciphertext = AES.new(dkey[:16], AES.MODE_CTR, initial_value=iv, nonce=b"").encrypt(secret)
    return {
        "crypto": {
            "cipher": CIPHER,
            "cipherparams": {"iv": iv.hex()},
            "ciphertext": ciphertext.hex(),
            "kdf": kdf,
            "kdfparams": params,
            "mac": _mac(dkey, ciphertext).hex(),
        }
    }


def decrypt_keyfile(keyfile: object, password: str) -> bytes:
    """nwaku's `decodeKeyFileJson`: the secret of one keyfile (a parsed JSON object)."""
    try:
        return _decrypt(keyfile, password)
    except _Unopened as e:
        if e.wrong_password:
            raise KeystoreError("wrong password for keyfile (its mac does not match)") from None
        raise KeystoreError(f"keyfile: {e.reason}") from None


def _decrypt(keyfile: object, password: str) -> bytes:
    crypto = _obj(keyfile, "crypto", "")
    kdf = crypto.get("kdf")
    if kdf not in ("pbkdf2", "scrypt"):
        raise _Unopened(f"kdf {kdf!r} is not supported (pbkdf2, scrypt)")
    cipher = crypto.get("cipher")
    if not isinstance(cipher, str) or cipher.lower() != CIPHER:
        raise _Unopened(f"cipher {cipher!r} is not supported ({CIPHER})")
    iv = _hex(_obj(crypto, "cipherparams", "crypto.").get("iv"), "crypto.cipherparams.iv")
    ciphertext = _hex(crypto.get("ciphertext"), "crypto.ciphertext")
    mac = _hex(crypto.get("mac"), "crypto.mac")
    params = _obj(crypto, "kdfparams", "crypto.")
    salt = _hex(params.get("salt"), "crypto.kdfparams.salt")
    dklen = _int_param(params, "dklen")
    if not 0 < dklen <= MAX_DKLEN:
        raise _Unopened(f"crypto.kdfparams.dklen {dklen} is not in 1..{MAX_DKLEN}")
    pw = password.encode("utf-8")
    # nwaku derives 32 bytes whatever dklen says (the first 32 of a longer key are the same).
    if kdf == "pbkdf2":
        prf = params.get("prf")
        digest = _PRFS.get(prf.lower()) if isinstance(prf, str) else None
        if digest is None:
            raise _Unopened(f"crypto.kdfparams.prf {prf!r} is not supported ({', '.join(_PRFS)})")
        rounds = _int_param(params, "c") or PBKDF2_ITERATIONS
        dkey = hashlib.pbkdf2_hmac(digest, pw, salt, rounds, DKLEN)
    else:
        n = _int_param(params, "n") or SCRYPT_N
        r, p = _int_param(params, "r"), _int_param(params, "p")
        try:
            dkey = _scrypt(password, salt, n, r, p)
        except ValueError as e:
            raise _Unopened(f"bad scrypt parameters n={n} r={r} p={p} ({e})") from None
    if not hmac.compare_digest(_mac(dkey, ciphertext), mac):
        raise _Unopened("mac does not match", wrong_password=True)
    if len(iv) != IV_SIZE:
        raise _Unopened(f"crypto.cipherparams.iv has {len(iv)} bytes, not {IV_SIZE}")
    return AES.new(dkey[:16], AES.MODE_CTR, initial_value=iv, nonce=b"").decrypt(ciphertext)


def _mac(dkey: bytes, ciphertext: bytes) -> bytes:
    h = keccak.new(digest_bits=256)
    h.update(dkey[16:32])
    h.update(ciphertext)
    return h.digest()


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    # pycryptodome's, not hashlib's: OpenSSL refuses N >= 2**(16 r), and nwaku's r=1, N=2**18 is that.
    if n < 2 or n & (n - 1) or r < 1 or p < 1:
        raise _Unopened(f"bad scrypt parameters n={n} r={r} p={p}")
    key = scrypt(password.encode("utf-8"), salt, DKLEN, N=n, r=r, p=p)
    assert isinstance(key, bytes)
    return key


def _obj(doc: object, key: str, prefix: str) -> dict[str, Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, dict):
        raise _Unopened(f"keyfile has no {prefix}{key} object")
    return value


def _hex(value: object, name: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise _Unopened(f"keyfile has no {name}")
    text = value[2:] if value[:2].lower() == "0x" else value
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise _Unopened(f"keyfile's {name} is not hex") from None


def _int_param(params: dict[str, Any], key: str) -> int:
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Unopened(f"keyfile's crypto.kdfparams.{key} is {value!r}, not a non-negative integer")
    return value


# --- the keystore file (keystore.nim, utils.nim) ---------------------------------------------


def load(
    path: str | os.PathLike[str],
    password: str,
    chain_id: str | int | None = None,
    contract_address: str | None = None,
    tree_index: int | None = None,
) -> MembershipCredential:
    """The credential to use, picked as nwaku's `getMembershipCredentials` picks it.

    One credential in the keystore: that one, whatever was asked (as nwaku; a warning is logged
    when it is not the one asked for). Several: the one filed under the membership hash of
    (chain_id, contract_address, tree_index) when all three are given and it is there; else every
    credential this password opens is decrypted and matched on what was given (chain ids compared
    as numbers, addresses without case), and exactly one must match. Unlike nwaku, which takes a
    missing index for 0, a missing index with several matches is an error that lists them.
    Each decryption is one key derivation (about a second at nwaku's million PBKDF2 rounds).
    """
    where = f"rln keystore {os.fspath(path)}"
    credentials = _credentials(_read(path, where), where)
    if not credentials:
        raise KeystoreError(f"{where} holds no credentials")
    query = (chain_id, contract_address, tree_index)
    if len(credentials) == 1:
        key, keyfile = next(iter(credentials.items()))
        credential = _open_or_raise(where, key, keyfile, password)
        if not _matches(credential, *query):
            log.warning("%s holds one credential (%s), not the one asked for (%s): using it, as nwaku does",
                        where, credential.describe(), _describe_query(*query))
        return credential
    if chain_id is not None and contract_address is not None and tree_index is not None:
        key = membership_key(chain_id, contract_address, tree_index)
        if key in credentials:
            return _open_or_raise(where, key, credentials[key], password)
    opened: list[MembershipCredential] = []
    unopened = 0
    for key, keyfile in credentials.items():
        try:
            opened.append(_open(where, key, keyfile, password))
        except _Unopened:
            unopened += 1
    if not opened:
        raise KeystoreError(f"wrong password for {where}")
    matches = [c for c in opened if _matches(c, *query)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        held = "; ".join(c.describe() for c in opened)
        if unopened:
            held += f"; and {unopened} credential(s) this password does not open"
        raise KeystoreError(f"{where} has no credential for {_describe_query(*query)}; it holds: {held}")
    if tree_index is None:
        indexes = ", ".join(str(c.tree_index) for c in matches)
        raise KeystoreError(f"{where} holds {len(matches)} credentials for {_describe_query(*query)} "
                            f"(indexes {indexes}): give the tree index of the one to use")
    held = "; ".join(c.describe() for c in matches)
    raise KeystoreError(f"{where} holds {len(matches)} credentials for {_describe_query(*query)}: "
                        f"give the chain id and contract address too ({held})")


def save(
    path: str | os.PathLike[str],
    password: str,
    credential: MembershipCredential,
    *,
    kdf_iterations: int = PBKDF2_ITERATIONS,
) -> bool:
    """nwaku's `addMembershipCredentials`: files ``credential`` in the keystore at ``path``.

    Creates the keystore when there is none. Returns False, leaving the file as it was, when the
    keystore already holds a credential under the same membership hash (chain, contract, index),
    as nwaku does. The file is replaced atomically, mode 0600. ``kdf_iterations`` is PBKDF2's
    round count (nwaku's million unless a test asks for fewer).
    """
    where = f"rln keystore {os.fspath(path)}"
    target = os.path.realpath(os.fspath(path))
    if os.path.lexists(path):
        doc = _read(path, where)
        credentials = _credentials(doc, where)
    else:
        # nwaku's createAppKeystore: %AppKeystore, fields in its declaration order.
        doc = {"application": APPLICATION, "appIdentifier": APP_IDENTIFIER, "credentials": {}, "version": VERSION}
        credentials = doc["credentials"]
    key = credential.keystore_key
    if key in credentials:
        return False
    credentials[key] = encrypt_keyfile(encode_credential(credential), password, work_factor=kdf_iterations)
    _write(target, (_compact(doc) + "\n").encode("utf-8"), where)
    return True


def _read(path: str | os.PathLike[str], where: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise KeystoreError(f"{where} not found") from None
    except IsADirectoryError:
        raise KeystoreError(f"{where} is a directory, not a file") from None
    except OSError as e:
        raise KeystoreError(f"{where} could not be read: {e.strerror or e}") from None
    if not raw.strip():
        raise KeystoreError(f"{where} is empty")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise KeystoreError(f"{where} is not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise KeystoreError(f"{where} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(doc, dict):
        raise KeystoreError(f"{where} is not an rln keystore: its JSON is {_json_kind(doc)}, not an object")
    missing = [k for k in ("application", "appIdentifier", "credentials", "version") if k not in doc]
    if missing:
        raise KeystoreError(f"{where} is not an rln keystore: no {', '.join(missing)} field")
    for name, want in (("application", APPLICATION), ("appIdentifier", APP_IDENTIFIER), ("version", VERSION)):
        if doc[name] != want:
            raise KeystoreError(f"{where} has {name} {json.dumps(doc[name])}, not {json.dumps(want)}")
    return doc


def _credentials(doc: dict[str, Any], where: str) -> dict[str, Any]:
    credentials = doc["credentials"]
    if not isinstance(credentials, dict):
        raise KeystoreError(f"{where} is not an rln keystore: credentials is {_json_kind(credentials)}, "
                            "not an object")
    return credentials


def _open(where: str, key: str, keyfile: object, password: str) -> MembershipCredential:
    """Decrypts and decodes one entry; `_Unopened` for a wrong password, KeystoreError otherwise."""
    try:
        plaintext = _decrypt(keyfile, password)
    except _Unopened as e:
        if e.wrong_password:
            raise
        raise KeystoreError(f"{where}: credential {key}: {e.reason}") from None
    try:
        return decode_credential(plaintext)
    except ValueError as e:
        raise KeystoreError(f"{where}: credential {key}: {e}") from None


def _open_or_raise(where: str, key: str, keyfile: object, password: str) -> MembershipCredential:
    try:
        return _open(where, key, keyfile, password)
    except _Unopened:
        raise KeystoreError(f"wrong password for {where}") from None


def _chain(value: str | int) -> str:
    """A chain id for comparison: decimal when it reads as a number (decimal or 0x hex)."""
    if isinstance(value, int):
        return str(value)
    text = value.strip()
    try:
        return str(int(text, 16) if text[:2].lower() == "0x" else int(text, 10))
    except ValueError:
        return text


def _matches(c: MembershipCredential, chain_id: str | int | None, contract_address: str | None,
             tree_index: int | None) -> bool:
    return ((chain_id is None or _chain(c.chain_id) == _chain(chain_id))
            and (contract_address is None or c.contract_address.lower() == contract_address.lower())
            and (tree_index is None or c.tree_index == tree_index))


def _describe_query(chain_id: str | int | None, contract_address: str | None, tree_index: int | None) -> str:
    parts = [f"chain {chain_id}" if chain_id is not None else "any chain",
             f"contract {contract_address}" if contract_address is not None else "any contract"]
    if tree_index is not None:
        parts.append(f"index {tree_index}")
    return " ".join(parts)


def _write(target: str, data: bytes, where: str) -> None:
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".rln-keystore-", dir=directory)
    except OSError as e:
        raise KeystoreError(f"{where} could not be written: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise KeystoreError(f"{where} could not be written: {e.strerror or e}") from None


__all__ = [
    "APPLICATION", "APP_IDENTIFIER", "VERSION", "PBKDF2_ITERATIONS", "KeystoreError", "MembershipCredential",
    "decode_credential", "decrypt_keyfile", "encode_credential", "encrypt_keyfile", "load", "membership_key",
    "save",
]
