from django.urls import path

from .api import DeliveryReplayView, EndpointDeliveryListView, EndpointDetailView, EndpointListView

urlpatterns = [
    path("webhooks/endpoints", EndpointListView.as_view(), name="webhook-endpoint-list"),
    path("webhooks/endpoints/<int:pk>", EndpointDetailView.as_view(), name="webhook-endpoint-detail"),
    path(
        "webhooks/endpoints/<int:pk>/deliveries",
        EndpointDeliveryListView.as_view(),
        name="webhook-endpoint-deliveries",
    ),
    path("webhooks/deliveries/<int:pk>/replay", DeliveryReplayView.as_view(), name="webhook-delivery-replay"),
]
