from django.urls import path

from . import api

urlpatterns = [
    path("timeseries", api.TimeseriesView.as_view(), name="usage-timeseries"),
    path("experts", api.ExpertsView.as_view(), name="usage-experts"),
    path("routing", api.RoutingView.as_view(), name="usage-routing"),
    path("latency", api.LatencyView.as_view(), name="usage-latency"),
    path("breakdown", api.BreakdownView.as_view(), name="usage-breakdown"),
    path("subtrees", api.SubtreesView.as_view(), name="usage-subtrees"),
]
