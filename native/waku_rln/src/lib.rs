//! The bridge's binding of zerokit's `rln` crate (the library nwaku links): RLN-v2 Groth16
//! proofs over BN254 for the embedded depth-20 circuit, Poseidon, hash-to-field, identities and
//! a Merkle tree for static memberships.
//!
//! Every field element crosses the boundary as 32 bytes little-endian (zerokit's and nwaku's
//! wire form); inputs are reduced modulo the field order as zerokit's own FFI does. Proving and
//! verifying release the GIL, so the bridge's trio loop keeps running while a worker thread
//! waits here.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;

use ark_ff::{BigInteger, PrimeField};
use ark_serialize::{CanonicalDeserialize, CanonicalSerialize};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rand::SeedableRng;
use rln::prelude::{
    hash_to_field_le, ArkGroth16Backend, ExtendedIdentityKeys, Fr, Hasher, PoseidonHash, Proof,
    RLNBuilder, RLNMerkleProof, RLNProofValues, RLNWitnessInput, SecretFr, Stateless,
    DEFAULT_TREE_DEPTH, RLN,
};
use zerokit_utils::merkle_tree::{OptimalMerkleTree, ZerokitMerkleProof, ZerokitMerkleTree};

type Verifier = RLN<Stateless, ArkGroth16Backend<PoseidonHash>>;

static ZK: OnceLock<Verifier> = OnceLock::new();

fn zk() -> &'static Verifier {
    ZK.get_or_init(|| RLNBuilder::stateless().build())
}

fn fr(name: &str, bytes: &[u8]) -> PyResult<Fr> {
    if bytes.len() != 32 {
        return Err(PyValueError::new_err(format!(
            "{name}: expected 32 bytes, got {}",
            bytes.len()
        )));
    }
    Ok(Fr::from_le_bytes_mod_order(bytes))
}

fn le(value: &Fr) -> [u8; 32] {
    let mut out = [0u8; 32];
    let bytes = value.into_bigint().to_bytes_le();
    out[..bytes.len()].copy_from_slice(&bytes);
    out
}

fn py_bytes<'py>(py: Python<'py>, value: &Fr) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &le(value))
}

/// Loads the proving key and witness graph (about a second); later calls return at once.
#[pyfunction]
fn warm_up(py: Python<'_>) {
    py.detach(|| {
        zk();
    });
}

/// The circuit's Merkle tree depth (20).
#[pyfunction]
fn tree_depth() -> usize {
    DEFAULT_TREE_DEPTH
}

/// Poseidon over BN254 (circom's parameters) of 1 to 16 field elements.
#[pyfunction]
fn poseidon<'py>(py: Python<'py>, inputs: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyBytes>> {
    if inputs.is_empty() || inputs.len() > 16 {
        return Err(PyValueError::new_err("poseidon: 1 to 16 inputs"));
    }
    let frs = inputs
        .iter()
        .map(|b| fr("poseidon input", b))
        .collect::<PyResult<Vec<Fr>>>()?;
    Ok(py_bytes(py, &Hasher::<PoseidonHash>::hash_list(&frs)))
}

/// keccak256(data) reduced little-endian modulo the field order (zerokit's hash_to_field_le).
#[pyfunction]
fn hash_to_field<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    py_bytes(py, &hash_to_field_le(data))
}

/// A new identity: (trapdoor, nullifier, secret = H(trapdoor, nullifier), commitment = H(secret)),
/// as nwaku's membershipKeyGen. With a seed, deterministic (ChaCha20 seeded by keccak(seed)).
#[pyfunction]
#[pyo3(signature = (seed=None))]
fn identity<'py>(
    py: Python<'py>,
    seed: Option<&[u8]>,
) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
    let keys = match seed {
        Some(s) => ExtendedIdentityKeys::generate_seeded::<PoseidonHash, rand_chacha::ChaCha20Rng>(s),
        None => {
            let mut rng = rand_chacha::ChaCha20Rng::from_entropy();
            ExtendedIdentityKeys::generate::<PoseidonHash, _>(&mut rng)
        }
    };
    (
        py_bytes(py, &keys.identity_trapdoor()),
        py_bytes(py, &keys.identity_nullifier()),
        py_bytes(py, &keys.identity_secret()),
        py_bytes(py, &keys.id_commitment()),
    )
}

/// The parsed inputs of one verification (what crosses the boundary, reduced to field elements).
struct VerifyInput {
    proof: Vec<u8>,
    values: RLNProofValues,
    x: Fr,
    roots: Vec<Fr>,
}

#[allow(clippy::too_many_arguments)]
fn verify_input(
    proof: &[u8],
    root: &[u8],
    external_nullifier: &[u8],
    x: &[u8],
    share_x: &[u8],
    share_y: &[u8],
    nullifier: &[u8],
    roots: &[Vec<u8>],
) -> PyResult<VerifyInput> {
    let values = RLNProofValues::new_single()
        .y(fr("share_y", share_y)?)
        .root(fr("root", root)?)
        .nullifier(fr("nullifier", nullifier)?)
        .x(fr("share_x", share_x)?)
        .external_nullifier(fr("external_nullifier", external_nullifier)?)
        .build();
    let x = fr("x", x)?;
    let roots = roots
        .iter()
        .map(|r| fr("roots", r))
        .collect::<PyResult<Vec<Fr>>>()?;
    Ok(VerifyInput { proof: proof.to_vec(), values, x, roots })
}

/// The verdict of one verification (no Python object touched: runs without the GIL).
fn verdict(input: &VerifyInput) -> &'static str {
    if input.proof.len() != 128 {
        return "proof";
    }
    let proof = match Proof::deserialize_compressed(input.proof.as_slice()) {
        Ok(p) => p,
        Err(_) => return "proof",
    };
    match zk().verify_with_roots(&proof, &input.values, &input.x, &input.roots) {
        Ok(true) => "valid",
        Ok(false) => "proof",
        Err(rln::prelude::VerifyProofError::InvalidRoot) => "root",
        Err(rln::prelude::VerifyProofError::InvalidSignal) => "signal",
        Err(_) => "proof",
    }
}

/// Verifies an RLN-v2 proof (the 128-byte compressed Groth16 proof and its public values)
/// against the signal's field element `x` and the acceptable `roots` (empty: no root check).
/// Returns "valid", "root" (root not in the window), "signal" (share_x is not x) or "proof".
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn verify(
    py: Python<'_>,
    proof: &[u8],
    root: &[u8],
    external_nullifier: &[u8],
    x: &[u8],
    share_x: &[u8],
    share_y: &[u8],
    nullifier: &[u8],
    roots: Vec<Vec<u8>>,
) -> PyResult<&'static str> {
    if proof.len() != 128 {
        return Ok("proof");
    }
    let input = verify_input(proof, root, external_nullifier, x, share_x, share_y, nullifier, &roots)?;
    Ok(py.detach(move || verdict(&input)))
}

struct InboxInner {
    done: Mutex<Vec<(u64, &'static str)>>,
    signal: File,
}

/// Where a `VerifyPool` hands verdicts back: a list and an eventfd (owned from here on) that
/// the pool's threads write after each verdict, so the waiting event loop wakes on its own
/// readiness (no Python thread, no GIL between a verdict and the loop).
#[pyclass]
struct Inbox {
    inner: Arc<InboxInner>,
}

#[pymethods]
impl Inbox {
    /// Takes ownership of `fd`, a non-blocking eventfd (closed when the inbox and every
    /// verification still running for it are gone).
    #[new]
    fn new(fd: i32) -> PyResult<Self> {
        if fd < 0 {
            return Err(PyValueError::new_err("inbox: a file descriptor"));
        }
        // SAFETY: the caller hands over an open descriptor it no longer uses or closes.
        let signal = unsafe { File::from_raw_fd(fd) };
        Ok(Self { inner: Arc::new(InboxInner { done: Mutex::new(Vec::new()), signal }) })
    }

    fn fileno(&self) -> i32 {
        self.inner.signal.as_raw_fd()
    }

    /// The verdicts handed back since the last call, as (job, verdict); resets the eventfd.
    fn take(&self) -> Vec<(u64, &'static str)> {
        let mut counter = [0u8; 8];
        let _ = (&self.inner.signal).read(&mut counter); // EAGAIN when nothing was written
        std::mem::take(&mut *self.inner.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct Job {
    id: u64,
    input: VerifyInput,
    inbox: Arc<InboxInner>,
}

/// `threads` native threads verifying proofs handed to `submit`; each verdict goes to the
/// job's inbox. The threads never take the GIL: a verification costs the caller one hand-over
/// to a waiting thread and one wake-up of its own loop.
#[pyclass]
struct VerifyPool {
    jobs: Mutex<mpsc::Sender<Job>>,
}

#[pymethods]
impl VerifyPool {
    #[new]
    fn new(threads: usize) -> PyResult<Self> {
        if threads < 1 {
            return Err(PyValueError::new_err(format!("verifier threads: at least 1, got {threads}")));
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            thread::Builder::new()
                .name(format!("rln-verify-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return, // the pool is gone
                    };
                    // a panic in the library would leave its caller waiting: hand it back as one
                    let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| verdict(&job.input)))
                        .unwrap_or("panic");
                    job.inbox.done.lock().unwrap_or_else(|e| e.into_inner()).push((job.id, v));
                    let _ = (&job.inbox.signal).write(&1u64.to_ne_bytes());
                })
                .map_err(|e| PyValueError::new_err(format!("verifier thread: {e}")))?;
        }
        Ok(Self { jobs: Mutex::new(tx) })
    }

    /// Queues one verification (verify's arguments); its verdict arrives in `inbox` as (job, verdict).
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        inbox: &Inbox,
        job: u64,
        proof: &[u8],
        root: &[u8],
        external_nullifier: &[u8],
        x: &[u8],
        share_x: &[u8],
        share_y: &[u8],
        nullifier: &[u8],
        roots: Vec<Vec<u8>>,
    ) -> PyResult<()> {
        let input = verify_input(proof, root, external_nullifier, x, share_x, share_y, nullifier, &roots)?;
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Job { id: job, input, inbox: Arc::clone(&inbox.inner) })
            .map_err(|_| PyValueError::new_err("verifier threads are gone"))
    }
}

/// Generates an RLN-v2 proof. Returns (proof 128 B, root, share_x, share_y, nullifier).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn prove<'py>(
    py: Python<'py>,
    identity_secret: &[u8],
    user_message_limit: u64,
    message_id: u64,
    path_elements: Vec<Vec<u8>>,
    identity_path_index: Vec<u8>,
    x: &[u8],
    external_nullifier: &[u8],
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
)> {
    let mut secret = fr("identity_secret", identity_secret)?;
    let path = path_elements
        .iter()
        .map(|p| fr("path_elements", p))
        .collect::<PyResult<Vec<Fr>>>()?;
    let x = fr("x", x)?;
    let en = fr("external_nullifier", external_nullifier)?;
    let result = py.detach(move || -> Result<(Vec<u8>, RLNProofValues), String> {
        let witness = RLNWitnessInput::new_single()
            .identity_secret(SecretFr::from(&mut secret))
            .user_message_limit(Fr::from(user_message_limit))
            .merkle_proof(RLNMerkleProof::new(path, identity_path_index))
            .x(x)
            .external_nullifier(en)
            .message_id(Fr::from(message_id))
            .build()
            .map_err(|e| format!("witness: {e}"))?;
        let (proof, values) = zk()
            .generate_proof(&witness)
            .map_err(|e| format!("proof generation: {e}"))?;
        let mut out = Vec::with_capacity(128);
        proof
            .serialize_compressed(&mut out)
            .map_err(|e| format!("proof serialization: {e}"))?;
        Ok((out, values))
    });
    let (proof, values) = result.map_err(PyValueError::new_err)?;
    let y = values
        .y()
        .ok_or_else(|| PyValueError::new_err("single proof without y"))?;
    let nullifier = values
        .nullifier()
        .ok_or_else(|| PyValueError::new_err("single proof without nullifier"))?;
    Ok((
        PyBytes::new(py, &proof),
        py_bytes(py, &values.root()),
        py_bytes(py, &values.x()),
        py_bytes(py, &y),
        py_bytes(py, &nullifier),
    ))
}

/// A Merkle tree of rate commitments (zerokit's OptimalMerkleTree, Poseidon, zero leaves 0):
/// the membership set of a static group.
#[pyclass]
struct MerkleTree {
    tree: OptimalMerkleTree<PoseidonHash>,
}

#[pymethods]
impl MerkleTree {
    #[new]
    #[pyo3(signature = (depth=DEFAULT_TREE_DEPTH))]
    fn new(depth: usize) -> PyResult<Self> {
        let tree = OptimalMerkleTree::<PoseidonHash>::default(depth)
            .map_err(|e| PyValueError::new_err(format!("merkle tree: {e}")))?;
        Ok(Self { tree })
    }

    fn set(&mut self, index: usize, leaf: &[u8]) -> PyResult<()> {
        let leaf = fr("leaf", leaf)?;
        self.tree
            .set(index, leaf)
            .map_err(|e| PyValueError::new_err(format!("merkle tree: {e}")))
    }

    fn root<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        py_bytes(py, &self.tree.root())
    }

    fn leaves_set(&self) -> usize {
        self.tree.leaves_set()
    }

    /// (path elements bottom-up, path index bits LSB first) of a leaf.
    fn proof<'py>(
        &self,
        py: Python<'py>,
        index: usize,
    ) -> PyResult<(Vec<Bound<'py, PyBytes>>, Vec<u8>)> {
        let proof = self
            .tree
            .proof(index)
            .map_err(|e| PyValueError::new_err(format!("merkle tree: {e}")))?;
        let elements = proof
            .get_path_elements()
            .iter()
            .map(|e| py_bytes(py, e))
            .collect();
        Ok((elements, proof.get_path_index()))
    }
}

#[pymodule]
fn waku_rln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(warm_up, m)?)?;
    m.add_function(wrap_pyfunction!(tree_depth, m)?)?;
    m.add_function(wrap_pyfunction!(poseidon, m)?)?;
    m.add_function(wrap_pyfunction!(hash_to_field, m)?)?;
    m.add_function(wrap_pyfunction!(identity, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(prove, m)?)?;
    m.add_class::<MerkleTree>()?;
    m.add_class::<Inbox>()?;
    m.add_class::<VerifyPool>()?;
    m.add("ZEROKIT_VERSION", "3.0.0")?;
    Ok(())
}
