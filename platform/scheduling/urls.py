"""The routers' endpoint, at the protocol's path (included under ``v1/`` by config.urls)."""

from django.urls import path

from treemeter_records.protocol import SCHEDULER_EVENTS_PATH

from .views import SchedulerEventsView

urlpatterns = [
    path(
        SCHEDULER_EVENTS_PATH.removeprefix("/v1/"),
        SchedulerEventsView.as_view(),
        name="agents-scheduler-events",
    )
]
