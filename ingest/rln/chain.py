"""The RLN membership contract on chain, as nwaku 0.38's on-chain group manager uses it
(`waku_rln_relay/group_manager/on_chain`): a synchronous Ethereum JSON-RPC client of a
`WakuRlnV2` contract (Linea Sepolia's, or our `WakuRlnV2Local` on a local Anvil,
tools/anvil_chain.py).

    chain = RlnChain("http://127.0.0.1:8545", "0x5FbD...", chain_id=1234)   # checks both
    chain.root()                   # 32 B, little-endian field element
    chain.merkle_proof(index)      # 20 x 32 B little-endian: the siblings from the leaf up
    chain.register(eth_key, id_commitment, user_message_limit)   # -> membership index

Field elements (idCommitment, roots, path nodes) are 32-byte little-endian here, as nwaku and
zerokit hold them; the chain's ABI has big-endian uint256 words. `field_to_uint` and
`uint_to_field` are the one place that converts.

`register` sends a signed EIP-1559 transaction (EIP-155 legacy where the chain has no base fee),
waits for its receipt and reads the MembershipRegistered event. The real contract also takes an
ERC20 deposit: the sender must have approved the contract for the token's price beforehand
(nwaku does not do it either). Every failure is a `ChainError` with a one-line message: the
endpoint unreachable or silent, a wrong chain id, no contract at the address, a revert with its
decoded reason.
"""
from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import coincurve
import eth_abi
import rlp  # type: ignore[import-untyped]
from Crypto.Hash import keccak

log = logging.getLogger("ingest.rln.chain")

# BN254's scalar field: idCommitments, leaves and roots are its elements.
FIELD_MODULUS = 21888242871839275222246405745257275088548364400416034343698204186575808495617
MERKLE_TREE_DEPTH = 20
MEMBERSHIP_REGISTERED = "MembershipRegistered(uint256,uint256,uint32)"


class ChainError(Exception):
    """A failed chain operation, in one line."""


def keccak256(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


def selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


# --- field elements: little-endian 32 B (nwaku, zerokit) <-> uint256 (the chain) -------------

def field_to_uint(element: bytes) -> int:
    """A 32-byte little-endian field element as the chain's uint256."""
    if len(element) != 32:
        raise ChainError(f"a field element is 32 bytes, not {len(element)}")
    return int.from_bytes(element, "little")


def uint_to_field(value: int) -> bytes:
    """A uint256 from the chain as a 32-byte little-endian field element."""
    if not 0 <= value < 1 << 256:
        raise ChainError(f"{value} is not a uint256")
    return value.to_bytes(32, "little")


# --- revert data -------------------------------------------------------------------------------

# WakuRlnV2's errors (and its Membership base's, and OpenZeppelin 5's ERC20 ones a register may
# hit through the deposit), by selector: a revert is told by name.
KNOWN_ERRORS = (
    "InvalidIdCommitment(uint256)", "InvalidMembershipRateLimit()", "CannotExceedMaxTotalRateLimit()",
    "DuplicateIdCommitment()", "CannotEraseActiveMembership(uint256)", "MembershipDoesNotExist(uint256)",
    "NonHolderCannotEraseGracePeriodMembership(uint256)", "CannotExtendNonGracePeriodMembership(uint256)",
    "NonHolderCannotExtend(uint256)", "InvalidPaginationQuery(uint256,uint256)",
    "ERC20InsufficientAllowance(address,uint256,uint256)", "ERC20InsufficientBalance(address,uint256,uint256)",
)
_ERRORS = {selector(sig): sig for sig in KNOWN_ERRORS}
_ERROR_STRING = selector("Error(string)")
_PANIC = selector("Panic(uint256)")
_PANICS = {0x01: "assertion failed", 0x11: "arithmetic overflow", 0x12: "division by zero",
           0x21: "bad enum value", 0x32: "index out of bounds", 0x41: "out of memory"}


def _argument(value: Any) -> str:
    if isinstance(value, int) and value >= 1 << 64:
        return hex(value)
    return str(value)


def revert_reason(data: bytes) -> str:
    """The reason a call reverted with `data`, in one line: the require string, the custom
    error with its arguments, the panic, or the raw selector of an unknown error."""
    if not data:
        return "no reason given"
    head, body = data[:4], data[4:]
    try:
        if head == _ERROR_STRING:
            (text,) = eth_abi.decode(["string"], body)
            return " ".join(str(text).split()) or "empty reason"
        if head == _PANIC:
            (code,) = eth_abi.decode(["uint256"], body)
            return f"Panic(0x{code:02x}: {_PANICS.get(code, 'unknown panic')})"
        if head in _ERRORS:
            sig = _ERRORS[head]
            name, _, types = sig.partition("(")
            kinds = [t for t in types.rstrip(")").split(",") if t]
            values = eth_abi.decode(kinds, body) if kinds else ()
            return f"{name}({', '.join(_argument(v) for v in values)})"
    except Exception:  # noqa: BLE001 - malformed revert data still gets a one-line reason
        pass
    return f"custom error 0x{head.hex()}" + (f" ({len(body)} B of arguments)" if body else "")


# --- the client ----------------------------------------------------------------------------------

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def _hex(value: int | bytes) -> str:
    return hex(value) if isinstance(value, int) else "0x" + value.hex()


def _bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise ChainError(f"{what}: expected hex data, got {str(value)[:60]!r}")
    try:
        return bytes.fromhex(value[2:])
    except ValueError:
        raise ChainError(f"{what}: malformed hex data {value[:60]!r}") from None


def _quantity(value: Any, what: str) -> int:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise ChainError(f"{what}: expected a hex quantity, got {str(value)[:60]!r}")
    try:
        return int(value, 16)
    except ValueError:
        raise ChainError(f"{what}: malformed quantity {value[:60]!r}") from None


def _private_key(key: bytes | str) -> coincurve.PrivateKey:
    try:
        raw = bytes.fromhex(key.removeprefix("0x")) if isinstance(key, str) else key
    except ValueError:
        raise ChainError("an Ethereum private key is 32 bytes of hex") from None
    if len(raw) != 32:
        raise ChainError("an Ethereum private key is 32 bytes")
    try:
        return coincurve.PrivateKey(raw)
    except Exception as exc:  # noqa: BLE001 - coincurve raises plain ValueError/TypeError variants
        raise ChainError(f"invalid private key: {exc}") from None


def address_of(key: bytes | str) -> str:
    """The Ethereum address (0x, lower case) of a secp256k1 private key."""
    public = _private_key(key).public_key.format(compressed=False)[1:]
    return "0x" + keccak256(public)[-20:].hex()


class RlnChain:
    """A WakuRlnV2 contract at `address` reached through the JSON-RPC `endpoint` (http or https).

    The constructor checks the endpoint answers, is chain `chain_id` (when given) and has code
    at `address`. `timeout_s` bounds each request; `receipt_timeout_s` the wait for a
    registration to be mined.
    """

    def __init__(self, endpoint: str, address: str, *, chain_id: int | None = None, timeout_s: float = 5.0,
                 receipt_timeout_s: float = 120.0) -> None:
        if not _ADDRESS.fullmatch(address):
            raise ChainError(f"{address!r} is not a contract address (0x and 40 hex digits)")
        if not endpoint.startswith(("http://", "https://")):
            raise ChainError(f"{endpoint!r} is not an http(s) JSON-RPC endpoint")
        self.endpoint = endpoint
        self.address = address.lower()
        self.timeout_s = timeout_s
        self.receipt_timeout_s = receipt_timeout_s
        self._next_id = 0
        actual = _quantity(self._rpc("eth_chainId", []), "eth_chainId")
        if chain_id is not None and actual != chain_id:
            raise ChainError(f"{endpoint} is chain {actual}, not chain {chain_id}")
        self._chain_id = actual
        if not _bytes(self._rpc("eth_getCode", [self.address, "latest"]), "eth_getCode"):
            raise ChainError(f"no contract at {self.address} on chain {actual} ({endpoint})")

    # -- JSON-RPC ---------------------------------------------------------------------------

    def _rpc(self, method: str, params: Sequence[Any], *, what: str | None = None) -> Any:
        """One JSON-RPC call; a revert is reported as `what` (default: the method) reverted."""
        self._next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": list(params)})
        request = urllib.request.Request(self.endpoint, body.encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ChainError(f"{self.endpoint} answered {method} with HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise ChainError(f"{self.endpoint} gave no answer to {method} in {self.timeout_s:g} s") from None
            raise ChainError(f"{self.endpoint} unreachable: {reason}") from None
        except TimeoutError:
            raise ChainError(f"{self.endpoint} gave no answer to {method} in {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ChainError(f"{self.endpoint} unreachable: {exc}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise ChainError(f"{self.endpoint} answered {method} with no JSON: {raw[:80]!r}") from None
        if not isinstance(answer, dict):
            raise ChainError(f"{self.endpoint} answered {method} with {str(answer)[:80]}")
        error = answer.get("error")
        if error is not None:
            raise self._rpc_error(method, error, what)
        if "result" not in answer:
            raise ChainError(f"{self.endpoint} answered {method} with neither result nor error")
        return answer["result"]

    def _rpc_error(self, method: str, error: Any, what: str | None) -> ChainError:
        if not isinstance(error, dict):
            return ChainError(f"{method} failed: {str(error)[:200]}")
        message = " ".join(str(error.get("message", "")).split())
        data = error.get("data")
        if isinstance(data, dict):  # some nodes nest it
            data = data.get("data")
        if "revert" in message.lower() or error.get("code") == 3:
            if isinstance(data, str) and data.startswith("0x"):
                try:
                    reason = revert_reason(bytes.fromhex(data[2:]))
                except ValueError:
                    reason = message
            else:
                reason = message.split("execution reverted", 1)[-1].lstrip(": ") or "no reason given"
            return ChainError(f"{what or method} reverted: {reason}")
        return ChainError(f"{method} failed: {message[:200] or error}")

    def _call(self, signature: str, types: Sequence[str] = (), args: Sequence[Any] = (),
              block: str = "latest") -> bytes:
        name = signature.partition("(")[0]
        data = selector(signature) + (eth_abi.encode(list(types), list(args)) if types else b"")
        result = self._rpc("eth_call", [{"to": self.address, "data": _hex(data)}, block], what=name)
        out = _bytes(result, name)
        if not out:
            raise ChainError(f"{name}: empty answer from {self.address} (not a WakuRlnV2 contract?)")
        return out

    def _uint(self, signature: str) -> int:
        out = self._call(signature)
        if len(out) != 32:
            raise ChainError(f"{signature}: expected one 32-byte word, got {len(out)} B")
        return int.from_bytes(out, "big")

    # -- reads ------------------------------------------------------------------------------

    def chain_id(self) -> int:
        """The chain id the endpoint answered (checked when connecting)."""
        return self._chain_id

    def root(self) -> bytes:
        """The Merkle root of the membership set (32 B little-endian)."""
        return uint_to_field(self._uint("root()"))

    def merkle_proof(self, index: int) -> list[bytes]:
        """The 20 sibling nodes (32 B little-endian each) of the leaf at `index`, from the leaf's
        level up to the root's children."""
        if not 0 <= index < 1 << 40:
            raise ChainError(f"membership index {index} is not a uint40")
        out = self._call("getMerkleProof(uint40)", ["uint40"], [index])
        if len(out) != 32 * MERKLE_TREE_DEPTH:
            raise ChainError(f"getMerkleProof: expected {32 * MERKLE_TREE_DEPTH} B, got {len(out)} B")
        (nodes,) = eth_abi.decode([f"uint256[{MERKLE_TREE_DEPTH}]"], out)
        return [uint_to_field(n) for n in nodes]

    def next_free_index(self) -> int:
        """The index the next membership gets."""
        return self._uint("nextFreeIndex()")

    def max_rate_limit(self) -> int:
        """The largest user message limit a membership may have (maxMembershipRateLimit)."""
        return self._uint("maxMembershipRateLimit()")

    def is_member(self, id_commitment: bytes) -> bool:
        """Whether the membership set holds this idCommitment (32 B little-endian)."""
        out = self._call("isInMembershipSet(uint256)", ["uint256"], [field_to_uint(id_commitment)])
        return len(out) == 32 and int.from_bytes(out, "big") == 1

    # -- registration -----------------------------------------------------------------------

    def register(self, private_key: bytes | str, id_commitment: bytes, user_message_limit: int) -> int:
        """Register a membership of `id_commitment` (32 B little-endian) with
        `user_message_limit` messages per epoch, paid by `private_key`'s account; returns its
        index in the membership set (from the MembershipRegistered event)."""
        if not 0 <= user_message_limit < 1 << 32:
            raise ChainError(f"user message limit {user_message_limit} is not a uint32")
        key = _private_key(private_key)
        sender = address_of(key.secret)
        commitment = field_to_uint(id_commitment)
        data = selector("register(uint256,uint32,uint256[])") + eth_abi.encode(
            ["uint256", "uint32", "uint256[]"], [commitment, user_message_limit, []])
        call = {"from": sender, "to": self.address, "data": _hex(data)}
        # An estimate runs the call: a registration that would revert stops here, with its reason.
        gas = _quantity(self._rpc("eth_estimateGas", [call], what="register"), "eth_estimateGas")
        gas = gas * 6 // 5 + 10_000
        nonce = _quantity(self._rpc("eth_getTransactionCount", [sender, "pending"]), "eth_getTransactionCount")
        raw = self._sign(key, nonce, gas, data)
        tx_hash = self._rpc("eth_sendRawTransaction", [_hex(raw)], what="register")
        receipt = self._wait_for_receipt(str(tx_hash))
        if _quantity(receipt.get("status"), "receipt status") != 1:
            # Run it again where it failed, for the reason (its state may have changed since).
            block = receipt.get("blockNumber", "latest")
            try:
                self._rpc("eth_call", [call, block], what="register")
            except ChainError as exc:
                raise ChainError(f"{exc} (transaction {tx_hash})") from None
            raise ChainError(f"register reverted on chain (transaction {tx_hash}, gas used "
                             f"{_quantity(receipt.get('gasUsed', '0x0'), 'gasUsed')} of {gas})")
        index = self._registered_index(receipt, commitment)
        log.info("registered membership %d (limit %d) on chain %d, transaction %s",
                 index, user_message_limit, self._chain_id, tx_hash)
        return index

    def _sign(self, key: coincurve.PrivateKey, nonce: int, gas: int, data: bytes) -> bytes:
        """The signed register transaction: EIP-1559 where blocks have a base fee, else EIP-155."""
        to = bytes.fromhex(self.address[2:])
        block = self._rpc("eth_getBlockByNumber", ["latest", False])
        base_fee = block.get("baseFeePerGas") if isinstance(block, dict) else None
        if base_fee is not None:
            base = _quantity(base_fee, "baseFeePerGas")
            try:
                tip = _quantity(self._rpc("eth_maxPriorityFeePerGas", []), "eth_maxPriorityFeePerGas")
            except ChainError:  # a node without the method: what its gas price offers above the base fee
                tip = max(_quantity(self._rpc("eth_gasPrice", []), "eth_gasPrice") - base, 0)
            max_fee = 2 * base + tip
            fields = [self._chain_id, nonce, tip, max_fee, gas, to, 0, data, []]
            digest = keccak256(b"\x02" + rlp.encode(fields))
            signature = key.sign_recoverable(digest, hasher=None)
            r, s, y = signature[:32], signature[32:64], signature[64]
            return b"\x02" + rlp.encode([*fields, y, int.from_bytes(r, "big"), int.from_bytes(s, "big")])
        # nwaku's rule for legacy chains: twice the node's gas price.
        gas_price = 2 * _quantity(self._rpc("eth_gasPrice", []), "eth_gasPrice")
        fields = [nonce, gas_price, gas, to, 0, data]
        digest = keccak256(rlp.encode([*fields, self._chain_id, 0, 0]))
        signature = key.sign_recoverable(digest, hasher=None)
        r, s, y = signature[:32], signature[32:64], signature[64]
        v = y + 35 + 2 * self._chain_id
        return rlp.encode([*fields, v, int.from_bytes(r, "big"), int.from_bytes(s, "big")])

    def _wait_for_receipt(self, tx_hash: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.receipt_timeout_s
        pause = 0.05
        while True:
            receipt = self._rpc("eth_getTransactionReceipt", [tx_hash])
            if isinstance(receipt, dict) and receipt.get("blockNumber"):
                return receipt
            if time.monotonic() + pause > deadline:
                raise ChainError(f"register: transaction {tx_hash} not mined in {self.receipt_timeout_s:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _registered_index(self, receipt: dict[str, Any], commitment: int) -> int:
        topic = _hex(keccak256(MEMBERSHIP_REGISTERED.encode()))
        for entry in receipt.get("logs") or []:
            topics = entry.get("topics") or []
            if not topics or str(topics[0]).lower() != topic or str(entry.get("address", "")).lower() != self.address:
                continue
            data = _bytes(entry.get("data"), "MembershipRegistered")
            if len(data) != 96:
                raise ChainError(f"MembershipRegistered: expected 96 B of data, got {len(data)} B")
            registered, _rate_limit, index = eth_abi.decode(["uint256", "uint256", "uint32"], data)
            if registered != commitment:
                raise ChainError(f"MembershipRegistered names idCommitment {registered:#x}, not {commitment:#x}")
            return int(index)
        raise ChainError(f"register: no MembershipRegistered event in transaction {receipt.get('transactionHash')}")


def first_chain(endpoints: Sequence[str], address: str, *, chain_id: int | None = None,
                timeout_s: float = 5.0) -> RlnChain:
    """The client of the first endpoint that answers with `chain_id` and a contract at `address`
    (nwaku tries its --rln-relay-eth-client-address endpoints the same way)."""
    errors = []
    for endpoint in endpoints:
        try:
            return RlnChain(endpoint, address, chain_id=chain_id, timeout_s=timeout_s)
        except ChainError as exc:
            errors.append(str(exc))
    raise ChainError("no Ethereum endpoint usable: " + "; ".join(errors))
