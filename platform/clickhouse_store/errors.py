"""What the ClickHouse layer raises when the engine refuses or cannot be reached, so that callers above
it (the ingest outbox keeps rows for a later try) catch it without importing the driver."""

from clickhouse_connect.driver.exceptions import ClickHouseError as StoreError

__all__ = ["StoreError"]
