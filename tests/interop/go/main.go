package main

import (
	_ "github.com/waku-org/go-waku/waku/v2/node"
	_ "github.com/waku-org/go-waku/waku/v2/protocol/filter"
	_ "github.com/waku-org/go-waku/waku/v2/protocol/lightpush"
	_ "github.com/waku-org/go-waku/waku/v2/protocol/store"
)

func main() {}
