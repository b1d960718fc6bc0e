// SPDX-License-Identifier: MIT OR Apache-2.0
pragma solidity ^0.8.24;

// The RLN membership contract of our local chain (tests and benchmarks): the part of WakuRlnV2's
// interface that nwaku 0.38's on-chain group manager calls, with the same types, events and
// reverts, and the same membership set: rate commitments Poseidon(idCommitment, rateLimit)
// (circom's Poseidon over BN254, t = 3) as leaves of a depth-20 lazy incremental Merkle tree
// whose empty leaves are 0 (zk-kit's LazyIMT over PoseidonT3, both linked external libraries).
//
// What it leaves out: the price of a membership (the real contract takes an ERC20 deposit through
// a price calculator), membership expiry, grace periods, extension and erasure, ownership and
// upgrades. Every membership here stays active, so erasing one always reverts as erasing an
// active membership does on the real contract.

import {LazyIMT, LazyIMTData} from "@zk-kit/lazy-imt.sol/LazyIMT.sol";
import {PoseidonT3} from "poseidon-solidity/PoseidonT3.sol";

/// The idCommitment is 0 or not below the BN254 scalar field's modulus
error InvalidIdCommitment(uint256 idCommitment);
/// The rate limit is outside [minMembershipRateLimit, maxMembershipRateLimit]
error InvalidMembershipRateLimit();
/// The memberships' rate limits would add up to more than maxTotalRateLimit
error CannotExceedMaxTotalRateLimit();
/// A membership to erase is still active (here: every membership)
error CannotEraseActiveMembership(uint256 idCommitment);
/// A membership to erase does not exist
error MembershipDoesNotExist(uint256 idCommitment);
/// startIndex > endIndex, or endIndex not below nextFreeIndex
error InvalidPaginationQuery(uint256 startIndex, uint256 endIndex);
/// Bounds given at deployment that do not hold together
error InvalidRateLimitBounds(uint32 minRateLimit, uint32 maxRateLimit, uint32 maxTotalRateLimit);

contract WakuRlnV2Local {
    /// The scalar field of BN254 (idCommitments and leaves are its elements)
    uint256 public constant Q =
        21888242871839275222246405745257275088548364400416034343698204186575808495617;

    /// The depth of the Merkle tree of rate commitments
    uint8 public constant MERKLE_TREE_DEPTH = 20;

    /// The number of leaves of the tree
    uint32 public constant MAX_MEMBERSHIP_SET_SIZE = uint32(1 << MERKLE_TREE_DEPTH);

    uint32 public minMembershipRateLimit;
    uint32 public maxMembershipRateLimit;
    uint32 public maxTotalRateLimit;
    uint32 public currentTotalRateLimit;

    /// The index the next membership gets (the number of memberships: none is erased here)
    uint32 public nextFreeIndex;

    /// The block this contract was deployed in
    uint32 public deployedBlockNumber;

    struct Membership {
        uint32 rateLimit;
        uint32 index;
        address holder;
    }

    mapping(uint256 idCommitment => Membership) internal members;

    LazyIMTData internal merkleTree;

    /// Data: idCommitment | membershipRateLimit | index, as the real contract emits it
    event MembershipRegistered(uint256 idCommitment, uint256 membershipRateLimit, uint32 index);

    constructor(uint32 minRateLimit, uint32 maxRateLimit, uint32 maxTotal) {
        if (minRateLimit == 0 || minRateLimit > maxRateLimit || maxRateLimit > maxTotal) {
            revert InvalidRateLimitBounds(minRateLimit, maxRateLimit, maxTotal);
        }
        minMembershipRateLimit = minRateLimit;
        maxMembershipRateLimit = maxRateLimit;
        maxTotalRateLimit = maxTotal;
        deployedBlockNumber = uint32(block.number);
        LazyIMT.init(merkleTree, MERKLE_TREE_DEPTH);
    }

    function isValidIdCommitment(uint256 idCommitment) public pure returns (bool) {
        return 0 < idCommitment && idCommitment < Q;
    }

    function isValidMembershipRateLimit(uint32 rateLimit) public view returns (bool) {
        return minMembershipRateLimit <= rateLimit && rateLimit <= maxMembershipRateLimit;
    }

    function isInMembershipSet(uint256 idCommitment) public view returns (bool) {
        return members[idCommitment].rateLimit != 0;
    }

    /// (rateLimit, index, rateCommitment) of a membership; (0, 0, 0) when there is none
    function getMembershipInfo(uint256 idCommitment) public view returns (uint32, uint32, uint256) {
        Membership memory m = members[idCommitment];
        if (m.rateLimit == 0) {
            return (0, 0, 0);
        }
        return (m.rateLimit, m.index, _leaf(m.index));
    }

    /// The rate commitments (leaves) at indices startIndex..endIndex, both included
    function getRateCommitmentsInRangeBoundsInclusive(uint32 startIndex, uint32 endIndex)
        public
        view
        returns (uint256[] memory)
    {
        if (startIndex > endIndex || endIndex >= nextFreeIndex) {
            revert InvalidPaginationQuery(startIndex, endIndex);
        }
        uint256[] memory leaves = new uint256[](endIndex - startIndex + 1);
        for (uint32 i = startIndex; i <= endIndex; i++) {
            leaves[i - startIndex] = _leaf(i);
        }
        return leaves;
    }

    function register(uint256 idCommitment, uint32 rateLimit) external {
        _register(idCommitment, rateLimit);
    }

    function register(uint256 idCommitment, uint32 rateLimit, uint256[] calldata idCommitmentsToErase) external {
        for (uint256 i = 0; i < idCommitmentsToErase.length; i++) {
            uint256 old = idCommitmentsToErase[i];
            if (!isInMembershipSet(old)) revert MembershipDoesNotExist(old);
            revert CannotEraseActiveMembership(old);
        }
        _register(idCommitment, rateLimit);
    }

    /// The root of the tree of rate commitments
    function root() external view returns (uint256) {
        return LazyIMT.root(merkleTree, MERKLE_TREE_DEPTH);
    }

    /// The 20 sibling nodes from the leaf at `index` up to the root (the leaf's level first)
    function getMerkleProof(uint40 index) public view returns (uint256[MERKLE_TREE_DEPTH] memory proof) {
        uint256[] memory elements = LazyIMT.merkleProofElements(merkleTree, index, MERKLE_TREE_DEPTH);
        for (uint8 i = 0; i < MERKLE_TREE_DEPTH; i++) {
            proof[i] = elements[i];
        }
    }

    function _register(uint256 idCommitment, uint32 rateLimit) internal {
        if (!isValidIdCommitment(idCommitment)) revert InvalidIdCommitment(idCommitment);
        require(!isInMembershipSet(idCommitment), "Duplicate idCommitment: membership already exists");
        require(nextFreeIndex < MAX_MEMBERSHIP_SET_SIZE, "Membership set is full");
        if (!isValidMembershipRateLimit(rateLimit)) revert InvalidMembershipRateLimit();
        if (uint256(currentTotalRateLimit) + rateLimit > maxTotalRateLimit) revert CannotExceedMaxTotalRateLimit();

        uint32 index = nextFreeIndex;
        currentTotalRateLimit += rateLimit;
        members[idCommitment] = Membership({rateLimit: rateLimit, index: index, holder: msg.sender});
        LazyIMT.insert(merkleTree, PoseidonT3.hash([idCommitment, uint256(rateLimit)]));
        nextFreeIndex = index + 1;

        emit MembershipRegistered(idCommitment, rateLimit, index);
    }

    function _leaf(uint32 index) internal view returns (uint256) {
        return merkleTree.elements[LazyIMT.indexForElement(0, index)];
    }
}
