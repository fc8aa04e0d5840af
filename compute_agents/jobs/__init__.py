"""The serving tree's asynchronous path: a durable queue between the L1 router and its job workers."""
