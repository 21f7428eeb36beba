"""State (JSON values by scope) and storage (bytes by area), each keyed per the run's snapshot."""

from __future__ import annotations

from agentrunner.errors import InvalidArgumentError
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.paging import FactArea, limit_of
from agentrunner_host.store.common import python_to_value, value_to_python
from agentrunner_host.store.state import scope_name
from agentrunner_host.store.storage import area_name

pb = proxy_service_pb2


def _state_resource(call: ProxyCall, scope: int, key: str) -> None:
    name = scope_name(scope) if scope else "unspecified"
    call.audit["resource"] = f"state:{name}:{key}"


def _storage_resource(call: ProxyCall, area: int, key: str) -> None:
    name = area_name(area) if area else "unspecified"
    call.audit["resource"] = f"storage:{name}:{key}"


class KeyValue(FactArea):
    """GetState, SetState, DeleteState, ListState and the same four for storage."""

    def table(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {
            "GetState": self.get_state,
            "SetState": self.set_state,
            "DeleteState": self.delete_state,
            "ListState": self.list_state,
            "GetStorage": self.get_storage,
            "SetStorage": self.set_storage,
            "DeleteStorage": self.delete_storage,
            "ListStorage": self.list_storage,
        }

    async def get_state(self, call: ProxyCall, request: pb.GetStateRequest) -> pb.GetStateResponse:
        _state_resource(call, request.scope, request.key)
        found, value = await self.stores.state.get(call.snapshot, request.scope, request.key)
        response = pb.GetStateResponse(found=found)
        if found:
            response.value.CopyFrom(python_to_value(value))
        return response

    async def set_state(self, call: ProxyCall, request: pb.SetStateRequest) -> pb.SetStateResponse:
        _state_resource(call, request.scope, request.key)
        if not request.HasField("value"):
            raise InvalidArgumentError("value is required (a null value deletes)", field="value")
        await self.stores.state.set(call.snapshot, request.scope, request.key, value_to_python(request.value))
        return pb.SetStateResponse()

    async def delete_state(self, call: ProxyCall, request: pb.DeleteStateRequest) -> pb.DeleteStateResponse:
        _state_resource(call, request.scope, request.key)
        return pb.DeleteStateResponse(
            deleted=await self.stores.state.delete(call.snapshot, request.scope, request.key)
        )

    async def list_state(self, call: ProxyCall, request: pb.ListStateRequest) -> pb.ListStateResponse:
        _state_resource(call, request.scope, request.prefix + "*")
        keys, has_more = await self.stores.state.list(
            call.snapshot, request.scope, request.prefix, limit_of(request.limit, 100, 100)
        )
        return pb.ListStateResponse(keys=keys, has_more=has_more)

    async def get_storage(self, call: ProxyCall, request: pb.GetStorageRequest) -> pb.GetStorageResponse:
        _storage_resource(call, request.area, request.key)
        value = await self.stores.storage.get(call.snapshot, request.area, request.key)
        return pb.GetStorageResponse(found=value is not None, value=value or b"")

    async def set_storage(self, call: ProxyCall, request: pb.SetStorageRequest) -> pb.SetStorageResponse:
        _storage_resource(call, request.area, request.key)
        await self.stores.storage.set(call.snapshot, request.area, request.key, request.value)
        return pb.SetStorageResponse()

    async def delete_storage(
        self, call: ProxyCall, request: pb.DeleteStorageRequest
    ) -> pb.DeleteStorageResponse:
        _storage_resource(call, request.area, request.key)
        return pb.DeleteStorageResponse(
            deleted=await self.stores.storage.delete(call.snapshot, request.area, request.key)
        )

    async def list_storage(self, call: ProxyCall, request: pb.ListStorageRequest) -> pb.ListStorageResponse:
        _storage_resource(call, request.area, request.prefix + "*")
        keys, has_more = await self.stores.storage.list(
            call.snapshot, request.area, request.prefix, limit_of(request.limit, 1000, 1000)
        )
        return pb.ListStorageResponse(keys=keys, has_more=has_more)
