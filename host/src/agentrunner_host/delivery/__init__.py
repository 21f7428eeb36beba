"""Delivery: how a run's replies, interactions and platform actions reach their surface.

`adapters` holds the `DeliveryAdapter` seam and the built-in gRPC adapter; `channel` the per-run fan-out
the run streams from; `handlers` the proxy RPCs (`SendReply`, `SendMessage`,
`RequestPlatformAction`); `store` the tables (delivered items, platform sends, interactions);
`interactions` the structured-interaction lifecycle (request -> answer -> `interaction.submitted` run).
"""
