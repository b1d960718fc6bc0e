"""`waku-bridge rln-keystore`: new RLN credentials, registered on the membership contract and
filed in nwaku's keystore (nwaku's `generateRlnKeystore` / tools/rln_keystore_generator shape).

    waku-bridge rln-keystore --set rln.eth_client_address=http://127.0.0.1:8545 \\
        --set rln.eth_contract_address=0x... --set rln.keystore_path=var/rln/keystore.json
    # the paying key and the keystore password from the environment:
    #   WAKU_RLN__ETH_PRIVATE_KEY=0x...  WAKU_RLN__KEYSTORE_PASSWORD=...

Prints one JSON line: the membership index, the id commitment, the keystore path. The bridge
then proves with it (rln.keystore_path, rln.keystore_password; docs/rln.md).
"""
from __future__ import annotations

import argparse
import json
import sys

from core.config import ConfigError, add_config_arguments, config_from_args
from ingest.rln import keystore, zk
from ingest.rln.chain import ChainError, field_to_uint, first_chain
from ingest.rln.keystore import KeystoreError, MembershipCredential
from ingest.rln.settings import contract_of


def register(endpoints: list[str], contract: str, chain_id: int, private_key: str, limit: int, path: str,
             password: str, *, kdf_iterations: int = keystore.PBKDF2_ITERATIONS) -> MembershipCredential:
    """Make an identity, register it with `limit` messages an epoch, file it; the credential."""
    chain = first_chain(endpoints, contract, chain_id=chain_id or None)
    trapdoor, nullifier, secret, commitment = zk.identity()
    index = chain.register(private_key, commitment, limit)
    credential = MembershipCredential(trapdoor, nullifier, secret, commitment, str(chain.chain_id()), contract,
                                      index, limit)
    keystore.save(path, password, credential, kdf_iterations=kdf_iterations)
    return credential


def cmd_rln_keystore(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    r = config["rln"]
    endpoints = [str(a) for a in r["eth_client_address"] if str(a)]
    contract, chain_id = contract_of(r, int(config["bridge"]["cluster_id"]))
    for key, value in (("rln.eth_client_address", endpoints), ("rln.eth_contract_address", contract),
                       ("rln.eth_private_key", r["eth_private_key"]), ("rln.keystore_path", r["keystore_path"]),
                       ("rln.keystore_password", r["keystore_password"])):
        if not value:
            raise ConfigError(f"{key}: empty, and `waku-bridge rln-keystore` needs it")
    limit = args.user_message_limit or int(r["user_message_limit"])
    path = config.path("rln.keystore_path")
    try:
        credential = register(endpoints, contract, chain_id, str(r["eth_private_key"]), limit, path,
                              str(r["keystore_password"]))
    except (ChainError, KeystoreError, ValueError) as exc:
        print(f"error: rln: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"membership_index": credential.tree_index, "user_message_limit": limit,
                      "id_commitment": hex(field_to_uint(credential.id_commitment)),
                      "chain_id": credential.chain_id, "contract": contract, "keystore": path}), flush=True)
    return 0


def add_keystore_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rln-keystore", help="create RLN credentials, register them on the membership contract "
                                            "and file them in an nwaku keystore (rln.keystore_path)")
    add_config_arguments(p)
    p.add_argument("--user-message-limit", type=int, default=0,
                   help="messages an epoch for the membership (default: rln.user_message_limit)")
    p.set_defaults(func=cmd_rln_keystore)
