"""A local Ethereum chain with the RLN membership contract: Anvil (Foundry's dev node, from npm)
on a free loopback port, with our `WakuRlnV2Local` (tests/rln_chain/, nwaku's WakuRlnV2
interface) and the libraries it links, PoseidonT3 and LazyIMT, deployed. Both are built by
scripts/build_rln_chain.sh into .cache/rln-chain/.

    with AnvilChain() as chain:               # Anvil started, libraries and contract deployed
        chain.endpoint                        # http://127.0.0.1:<port>
        chain.chain_id                        # 1234, as nwaku's tests
        chain.contract_address                # 0x... of WakuRlnV2Local
        chain.private_key                     # 0x... of a funded account that deployed nothing
        chain.deploy(max_rate_limit=100)      # another WakuRlnV2Local (other bounds): its address

Blocks are mined as transactions arrive (Anvil's automine). The deployer is Anvil's first dev
account, which signs through Anvil itself (eth_sendTransaction); `private_keys` are the other dev
accounts', each funded with 10,000 ETH. Anvil's state and log live in a temporary directory
removed on stop. The process runs in its own process group and is stopped with it.
Command line: ``python -m tools.anvil_chain [--port N] [--chain-id N] [--max-rate-limit N]``
prints the endpoint, chain id, contract address and a funded key, and runs until SIGINT/SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tools.processes import free_port, stop_process

log = logging.getLogger("tools.anvil_chain")

REPO_ROOT = Path(__file__).resolve().parent.parent
CHAIN_DIR = REPO_ROOT / ".cache" / "rln-chain"
ANVIL = CHAIN_DIR / "anvil"
ARTEFACT = CHAIN_DIR / "WakuRlnV2Local.json"
BUILD = "bash scripts/build_rln_chain.sh"

CHAIN_ID = 1234               # nwaku's tests/waku_rln_relay/utils_onchain.nim
MIN_RATE_LIMIT = 1
MAX_RATE_LIMIT = 600          # WakuRlnV2's deployment default (messages per epoch)
MAX_TOTAL_RATE_LIMIT = 160_000


class AnvilChainError(Exception):
    pass


def built() -> bool:
    """Whether scripts/build_rln_chain.sh has built Anvil and the contract."""
    return ANVIL.exists() and ARTEFACT.exists()


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def link(unit: dict[str, Any], addresses: dict[str, str]) -> str:
    """A unit's creation bytecode with each library placeholder replaced by the library's
    address (solc's linkReferences: byte offsets into the bytecode)."""
    code = unit["bytecode"].removeprefix("0x")  # placeholders "__$<hash>$__" in the hex
    for source, names in unit["linkReferences"].items():
        for name, refs in names.items():
            key = f"{source}:{name}"
            if key not in addresses:
                raise AnvilChainError(f"{unit['name']} links {key}, which is not deployed")
            address = addresses[key].removeprefix("0x").lower()
            for ref in refs:
                start, length = 2 * ref["start"], 2 * ref["length"]
                code = code[:start] + address.rjust(length, "0") + code[start + length:]
    try:
        bytes.fromhex(code)
    except ValueError:
        raise AnvilChainError(f"{unit['name']}'s bytecode still has placeholders after linking") from None
    return "0x" + code


class AnvilChain:
    """One Anvil process with WakuRlnV2Local deployed (`start`, or `with`)."""

    def __init__(self, *, port: int = 0, chain_id: int = CHAIN_ID, min_rate_limit: int = MIN_RATE_LIMIT,
                 max_rate_limit: int = MAX_RATE_LIMIT, max_total_rate_limit: int = MAX_TOTAL_RATE_LIMIT,
                 accounts: int = 5, hardfork: str | None = None) -> None:
        self.port = port or free_port()
        self.hardfork = hardfork            # Anvil's --hardfork; e.g. "berlin": no base fee, legacy transactions
        self.chain_id = chain_id
        self.bounds = (min_rate_limit, max_rate_limit, max_total_rate_limit)
        self.accounts = max(2, accounts)
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self.deployer = ""                      # Anvil's first dev account (unlocked)
        self.private_keys: list[str] = []       # the other dev accounts' keys, funded
        self.libraries: dict[str, str] = {}     # "source:name" -> address
        self.contract_address = ""
        self.deployed_block = 0
        self._id = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def private_key(self) -> str:
        """A funded account's key (0x hex) that the deployment did not use."""
        return self.private_keys[0]

    # -- JSON-RPC (the bridge's client lives in ingest/rln/chain.py; tools do not import it) --

    def rpc(self, method: str, params: Sequence[Any] = (), timeout_s: float = 10.0) -> Any:
        self._id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self._id, "method": method, "params": list(params)}).encode()
        request = urllib.request.Request(self.endpoint, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise AnvilChainError(f"Anvil on {self.endpoint}: {method} failed: {exc}") from None
        if answer.get("error"):
            raise AnvilChainError(f"Anvil on {self.endpoint}: {method}: {answer['error'].get('message')}")
        return answer.get("result")

    def _transact(self, data: str, what: str) -> str:
        """Send a creation transaction from the deployer; the new contract's address."""
        # A legacy (gas price) transaction: Anvil takes it under every hardfork.
        tx = {"from": self.deployer, "data": data, "gasPrice": self.rpc("eth_gasPrice")}
        tx_hash = self.rpc("eth_sendTransaction", [tx])
        deadline = time.monotonic() + 30
        while True:
            receipt = self.rpc("eth_getTransactionReceipt", [tx_hash])
            if receipt:
                break
            if time.monotonic() > deadline:
                raise AnvilChainError(f"deploying {what}: transaction {tx_hash} not mined in 30 s")
            time.sleep(0.05)
        if int(receipt["status"], 16) != 1 or not receipt.get("contractAddress"):
            raise AnvilChainError(f"deploying {what} failed (transaction {tx_hash})")
        return str(receipt["contractAddress"])

    # -- life cycle ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> AnvilChain:
        if not built():
            raise AnvilChainError(f"{ANVIL} or {ARTEFACT} missing: build them with {BUILD}")
        self.workdir = Path(tempfile.mkdtemp(prefix="anvil-chain-"))
        config = self.workdir / "config.json"
        logfile = open(self.workdir / "anvil.log", "ab")
        cmd = [str(ANVIL), "--host", "127.0.0.1", "--port", str(self.port), "--chain-id", str(self.chain_id),
               "--accounts", str(self.accounts), "--config-out", str(config)]
        if self.hardfork:
            cmd += ["--hardfork", self.hardfork]
        self.proc = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=self.workdir)
        logfile.close()
        try:
            self._wait_ready(timeout_s)
            keys = json.loads(config.read_text())
            self.deployer = keys["available_accounts"][0]
            self.private_keys = list(keys["private_keys"][1:])
            self.contract_address = self.deploy(*self.bounds)
        except BaseException:
            self.stop()
            raise
        log.info("Anvil on %s (chain %d): WakuRlnV2Local at %s", self.endpoint, self.chain_id, self.contract_address)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None and self.workdir is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                tail = (self.workdir / "anvil.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise AnvilChainError(f"anvil exited with {self.proc.returncode}: {' '.join(tail) or 'no output'}")
            try:
                answer: int | None = int(self.rpc("eth_chainId", timeout_s=1.0), 16)
            except AnvilChainError:
                answer = None  # not listening yet
            if answer is not None and answer != self.chain_id:
                raise AnvilChainError(f"chain {answer}, not Anvil's {self.chain_id}, answers on {self.endpoint}")
            if answer is not None and (self.workdir / "config.json").exists():
                return
            if time.monotonic() > deadline:
                raise AnvilChainError(f"Anvil not answering on {self.endpoint} in {timeout_s:g} s")
            time.sleep(0.05)

    def deploy(self, min_rate_limit: int = MIN_RATE_LIMIT, max_rate_limit: int = MAX_RATE_LIMIT,
               max_total_rate_limit: int = MAX_TOTAL_RATE_LIMIT) -> str:
        """Deploy a WakuRlnV2Local with these rate limit bounds (the libraries once per chain);
        its address."""
        artefact = json.loads(ARTEFACT.read_text())
        for unit in artefact["libraries"]:
            key = f"{unit['source']}:{unit['name']}"
            if key not in self.libraries:
                self.libraries[key] = self._transact(link(unit, self.libraries), unit["name"])
        contract = artefact["contract"]
        args = b"".join(_word(v) for v in (min_rate_limit, max_rate_limit, max_total_rate_limit))
        address = self._transact(link(contract, self.libraries) + args.hex(), contract["name"])
        self.deployed_block = int(self.rpc("eth_blockNumber"), 16)
        return address

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 5, group=True)
            self.proc = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> AnvilChain:
        return self.start() if self.proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.anvil_chain", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8540, help="JSON-RPC port (default 8540, nwaku's tests'; 0: free)")
    p.add_argument("--chain-id", type=int, default=CHAIN_ID)
    p.add_argument("--min-rate-limit", type=int, default=MIN_RATE_LIMIT)
    p.add_argument("--max-rate-limit", type=int, default=MAX_RATE_LIMIT)
    p.add_argument("--max-total-rate-limit", type=int, default=MAX_TOTAL_RATE_LIMIT)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with AnvilChain(port=args.port, chain_id=args.chain_id, min_rate_limit=args.min_rate_limit,
                        max_rate_limit=args.max_rate_limit, max_total_rate_limit=args.max_total_rate_limit) as chain:
            print(f"endpoint {chain.endpoint}")
            print(f"chain id {chain.chain_id}")
            print(f"contract {chain.contract_address}")
            print(f"private key {chain.private_key}", flush=True)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except AnvilChainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
