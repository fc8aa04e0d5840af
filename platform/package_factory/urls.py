from django.urls import path

from . import api

urlpatterns = [
    path("factory/templates", api.TemplateListView.as_view(), name="factory-templates"),
    path("factory/packages", api.BuildListView.as_view(), name="factory-builds"),
    path("factory/packages/<str:code>", api.BuildDetailView.as_view(), name="factory-build"),
    path("factory/artifacts/<str:sha256>", api.ArtifactView.as_view(), name="factory-artifact"),
]
