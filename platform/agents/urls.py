from django.urls import path

from treemeter_records.protocol import MANIFEST_REFUSALS_PATH

from . import model_keys_api

urlpatterns = [
    path(
        "models/publisher-keys",
        model_keys_api.ModelPublisherKeyListView.as_view(),
        name="model-publisher-keys",
    ),
    path(
        "models/manifest-refusals",
        model_keys_api.ManifestRefusalListView.as_view(),
        name="model-manifest-refusals",
    ),
    path(
        MANIFEST_REFUSALS_PATH.removeprefix("/v1/"),
        model_keys_api.ManifestRefusalReportView.as_view(),
        name="agent-manifest-refusals",
    ),
]
