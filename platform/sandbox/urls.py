from django.urls import path

from . import api

urlpatterns = [
    path("sandbox", api.SandboxView.as_view(), name="sandbox"),
    path("sandbox/keys", api.SandboxKeysView.as_view(), name="sandbox-keys"),
    path("sandbox/reset", api.SandboxResetView.as_view(), name="sandbox-reset"),
    path("sandbox/projection", api.SandboxProjectionView.as_view(), name="sandbox-projection"),
]
