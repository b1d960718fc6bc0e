"""19/WAKU2-LIGHTPUSH: light clients publish through the bridge (v3 and v2). A pushed message
is validated like a relayed one, produced to Kafka with source `lightpush` (the answer waits
for Kafka's acknowledgement) and published on relay."""
