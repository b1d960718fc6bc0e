// Compiles WakuRlnV2Local.sol with solc-js (the npm package "solc", no native compiler) and writes
// one JSON file: the contract's ABI and creation bytecode, and the external libraries it needs
// deployed first, in deployment order, each with its link references (byte offsets of the
// 20-byte address placeholders in its bytecode). Called by scripts/build_rln_chain.sh:
//
//     node compile.mjs OUT.json
//
// Exits 2 with one line "error: ..." on stderr on any failure.
import * as fs from 'node:fs'
import * as path from 'node:path'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(import.meta.url)

function fail (msg) {
  process.stderr.write(`error: ${msg}\n`)
  process.exit(2)
}

const out = process.argv[2]
if (!out) fail('usage: node compile.mjs OUT.json')

let solc
try {
  solc = require('solc')
} catch (e) {
  fail(`solc-js not installed in ${here}/node_modules (${e.message.split('\n')[0]})`)
}

const MAIN = 'WakuRlnV2Local.sol'
// Paris: no PUSH0, so the bytecode also deploys on chains behind Ethereum's latest forks.
const EVM_VERSION = 'paris'

const input = {
  language: 'Solidity',
  sources: { [MAIN]: { content: fs.readFileSync(path.join(here, MAIN), 'utf8') } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: EVM_VERSION,
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.bytecode.linkReferences'] } }
  }
}

function findImports (name) {
  // Imports name npm packages ("poseidon-solidity/PoseidonT3.sol"): read them from node_modules.
  const file = path.join(here, 'node_modules', name)
  if (!file.startsWith(path.join(here, 'node_modules') + path.sep)) return { error: `bad import ${name}` }
  try {
    return { contents: fs.readFileSync(file, 'utf8') }
  } catch {
    return { error: `import ${name} not found in ${here}/node_modules` }
  }
}

const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }))
const errors = (output.errors || []).filter(e => e.severity === 'error')
if (errors.length) fail(`solc: ${errors[0].formattedMessage.split('\n')[0]} (${errors.length} error(s))`)

function unit (source, name) {
  const c = output.contracts?.[source]?.[name]
  if (!c) fail(`solc produced no ${source}:${name}`)
  return {
    name,
    source,
    abi: c.abi,
    bytecode: '0x' + c.evm.bytecode.object,
    linkReferences: c.evm.bytecode.linkReferences || {}
  }
}

// Libraries before those that link them: PoseidonT3 (links nothing), LazyIMT (links PoseidonT3).
const libraries = [
  unit('poseidon-solidity/PoseidonT3.sol', 'PoseidonT3'),
  unit('@zk-kit/lazy-imt.sol/LazyIMT.sol', 'LazyIMT')
]
const contract = unit(MAIN, 'WakuRlnV2Local')

const known = new Set()
for (const u of [...libraries, contract]) {
  for (const [src, names] of Object.entries(u.linkReferences)) {
    for (const name of Object.keys(names)) {
      if (!known.has(`${src}:${name}`)) fail(`${u.name} links ${src}:${name}, which is not deployed before it`)
    }
  }
  known.add(`${u.source}:${u.name}`)
}

const artefact = { solc: solc.version(), evmVersion: EVM_VERSION, libraries, contract }
fs.mkdirSync(path.dirname(out), { recursive: true })
fs.writeFileSync(out + '.tmp', JSON.stringify(artefact, null, 1) + '\n')
fs.renameSync(out + '.tmp', out)
const size = u => (u.bytecode.length - 2) / 2
process.stdout.write(`compiled ${contract.name} with solc ${solc.version()}: ` +
  [...libraries, contract].map(u => `${u.name} ${size(u)} B`).join(', ') + '\n')
