"""RLN's membership contract on a real local chain: Anvil with our WakuRlnV2Local deployed
(tools/anvil_chain.py), reached through the bridge's client (ingest/rln/chain.py) as nwaku 0.38's
on-chain group manager reaches WakuRlnV2: registrations, the root after each, the next free index,
membership, Merkle proofs that hash up to the root, the rate limit bounds and their reverts, and
the client's one-line errors.

The Merkle tree's hash is recomputed in Python through the chain's own PoseidonT3 library
(checked against circomlib's Poseidon([1, 2]) vector) and, where the zerokit extension
`waku_rln` is importable, through zerokit's Poseidon too: the tree nwaku proves against.
"""
from __future__ import annotations

import secrets
import socket

import eth_abi
import pytest

from ingest.rln import zk
from ingest.rln.chain import FIELD_MODULUS, ChainError, RlnChain, field_to_uint, selector, uint_to_field
from tools.anvil_chain import ANVIL, ARTEFACT, BUILD, AnvilChain, built

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not built(), reason=f"the local RLN chain is not built ({ANVIL}, {ARTEFACT}): run {BUILD}"),
]

DEPTH = 20
# circomlib's Poseidon (BN254, t = 3) of [1, 2] (circomlibjs' test vector).
POSEIDON_1_2 = 0x115CC0F5E7D690413DF64C6B9662E9CF2A3617F2743245519E19607A4417189A


@pytest.fixture(scope="module")
def anvil():
    with AnvilChain() as chain:
        yield chain


@pytest.fixture(scope="module")
def rln(anvil):
    return RlnChain(anvil.endpoint, anvil.contract_address, chain_id=anvil.chain_id)


def chain_poseidon(anvil: AnvilChain):
    """Poseidon(a, b) over uint256s by the chain's PoseidonT3 library (an eth_call)."""
    address = anvil.libraries["poseidon-solidity/PoseidonT3.sol:PoseidonT3"]

    def hash2(a: int, b: int) -> int:
        data = selector("hash(uint256[2])") + eth_abi.encode(["uint256[2]"], [[a, b]])
        return int(anvil.rpc("eth_call", [{"to": address, "data": "0x" + data.hex()}, "latest"]), 16)
    return hash2


def zerokit_poseidon():
    """Poseidon(a, b) by zerokit (ingest/rln/zk.py over waku_rln), over uint256s."""
    def hash2(a: int, b: int) -> int:
        return field_to_uint(zk.poseidon([uint_to_field(a), uint_to_field(b)]))
    return hash2


def root_from_proof(hash2, leaf: int, index: int, path: list[bytes]) -> int:
    """The root a leaf at `index` and its 20 siblings (little-endian, leaf level first) give
    (nwaku's getRootFromProofAndIndex)."""
    node = leaf
    for level, sibling in enumerate(path):
        s = field_to_uint(sibling)
        node = hash2(s, node) if index >> level & 1 else hash2(node, s)
    return node


def new_id_commitment() -> bytes:
    return uint_to_field(secrets.randbelow(FIELD_MODULUS - 1) + 1)


def test_chain_poseidon_is_circomlibs(anvil):
    assert chain_poseidon(anvil)(1, 2) == POSEIDON_1_2


def test_empty_tree(anvil):
    """A fresh deployment's root is that of 2^20 zero leaves; reads of an empty set."""
    hash2 = chain_poseidon(anvil)
    empty = RlnChain(anvil.endpoint, anvil.deploy(), chain_id=anvil.chain_id)
    zero = 0
    for _ in range(DEPTH):
        zero = hash2(zero, zero)
    assert empty.root() == uint_to_field(zero)
    assert empty.next_free_index() == 0
    assert empty.max_rate_limit() == 600
    assert not empty.is_member(new_id_commitment())
    with pytest.raises(ChainError, match=r"^getMerkleProof reverted: LazyIMT: leaf must exist$"):
        empty.merkle_proof(0)


def test_register_three_members(anvil, rln):
    hash2 = chain_poseidon(anvil)
    start = rln.next_free_index()
    members: list[tuple[bytes, int]] = []
    roots = [rln.root()]
    for limit in (1, 20, 600):
        id_commitment = new_id_commitment()
        assert not rln.is_member(id_commitment)
        index = rln.register(anvil.private_key, id_commitment, limit)
        assert index == start + len(members)
        members.append((id_commitment, limit))
        assert rln.next_free_index() == index + 1
        assert rln.is_member(id_commitment)
        root = rln.root()
        assert root not in roots, "the root changes with every registration"
        roots.append(root)
        # The new member's proof hashes up to the new root, from its rate commitment.
        leaf = hash2(field_to_uint(id_commitment), limit)
        assert root_from_proof(hash2, leaf, index, rln.merkle_proof(index)) == field_to_uint(root)
    # Registered by EIP-1559 transactions on a chain with a base fee.
    tx = anvil.rpc("eth_getBlockByNumber", ["latest", True])["transactions"][0]
    assert int(tx["type"], 16) == 2 and int(tx["chainId"], 16) == anvil.chain_id
    # Every member's proof against the final root.
    final = field_to_uint(roots[-1])
    for i, (id_commitment, limit) in enumerate(members):
        path = rln.merkle_proof(start + i)
        assert len(path) == DEPTH and all(len(node) == 32 for node in path)
        assert root_from_proof(hash2, hash2(field_to_uint(id_commitment), limit), start + i, path) == final


def test_proofs_with_zerokit_poseidon(anvil, rln):
    """The chain's tree is the one zerokit hashes: leaves Poseidon(idCommitment, limit) and the
    root from each member's proof, all by waku_rln."""
    zerokit = zerokit_poseidon()
    assert zerokit(1, 2) == POSEIDON_1_2
    members = []
    for limit in (1, 7):
        id_commitment = new_id_commitment()
        members.append((rln.register(anvil.private_key, id_commitment, limit), id_commitment, limit))
    root = field_to_uint(rln.root())
    for index, id_commitment, limit in members:
        leaf = zerokit(field_to_uint(id_commitment), limit)
        assert root_from_proof(zerokit, leaf, index, rln.merkle_proof(index)) == root


def test_rate_limit_bounds_revert(anvil, rln):
    assert rln.max_rate_limit() == 600
    before = (rln.next_free_index(), rln.root())
    for limit in (0, 601):
        with pytest.raises(ChainError, match=r"^register reverted: InvalidMembershipRateLimit\(\)$"):
            rln.register(anvil.private_key, new_id_commitment(), limit)
    assert (rln.next_free_index(), rln.root()) == before
    # Bounds of another deployment.
    narrow = RlnChain(anvil.endpoint, anvil.deploy(min_rate_limit=5, max_rate_limit=100), chain_id=anvil.chain_id)
    assert narrow.max_rate_limit() == 100
    for limit in (4, 101):
        with pytest.raises(ChainError, match=r"InvalidMembershipRateLimit\(\)"):
            narrow.register(anvil.private_keys[1], new_id_commitment(), limit)
    assert narrow.register(anvil.private_keys[1], new_id_commitment(), 100) == 0


def test_register_reverts(anvil, rln):
    id_commitment = new_id_commitment()
    rln.register(anvil.private_key, id_commitment, 10)
    with pytest.raises(ChainError, match=r"^register reverted: Duplicate idCommitment: membership already exists$"):
        rln.register(anvil.private_key, id_commitment, 10)
    with pytest.raises(ChainError, match=r"^register reverted: InvalidIdCommitment\(0\)$"):
        rln.register(anvil.private_key, bytes(32), 10)
    with pytest.raises(ChainError, match=r"^register reverted: InvalidIdCommitment\(0x"):
        rln.register(anvil.private_key, uint_to_field(FIELD_MODULUS), 10)
    with pytest.raises(ChainError, match=r"not a uint32"):
        rln.register(anvil.private_key, new_id_commitment(), 1 << 32)


def test_connection_errors(anvil):
    with pytest.raises(ChainError, match=rf"^{anvil.endpoint} is chain {anvil.chain_id}, not chain 59141$"):
        RlnChain(anvil.endpoint, anvil.contract_address, chain_id=59141)
    with pytest.raises(ChainError, match=r"^no contract at 0x1{40} on chain"):
        RlnChain(anvil.endpoint, "0x" + "1" * 40)
    # Anvil's first dev account: an address without code.
    with pytest.raises(ChainError, match=r"^no contract at"):
        RlnChain(anvil.endpoint, anvil.deployer)
    with pytest.raises(ChainError, match=r"^http://127\.0\.0\.1:1 unreachable: "):
        RlnChain("http://127.0.0.1:1", anvil.contract_address, timeout_s=1)
    with pytest.raises(ChainError, match=r"not a contract address"):
        RlnChain(anvil.endpoint, "0x1234")
    # A server that takes the connection and never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ChainError, match=rf"^{endpoint} gave no answer to eth_chainId in 0.5 s$"):
            RlnChain(endpoint, anvil.contract_address, timeout_s=0.5)


def test_register_on_a_chain_without_base_fee():
    """Before London (no base fee) a registration is an EIP-155 legacy transaction."""
    with AnvilChain(hardfork="berlin") as old:
        rln = RlnChain(old.endpoint, old.contract_address, chain_id=old.chain_id)
        id_commitment = new_id_commitment()
        assert rln.register(old.private_key, id_commitment, 3) == 0
        assert rln.register(old.private_key, new_id_commitment(), 4) == 1
        assert rln.is_member(id_commitment) and rln.next_free_index() == 2
        tx = old.rpc("eth_getBlockByNumber", ["latest", True])["transactions"][0]
        assert int(tx["type"], 16) == 0 and int(tx["chainId"], 16) == old.chain_id
