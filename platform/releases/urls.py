from django.urls import path

from . import api

urlpatterns = [
    path("releases", api.PlanListView.as_view(), name="release-plan-list"),
    path("releases/<str:code>", api.PlanDetailView.as_view(), name="release-plan-detail"),
    path("releases/<str:code>/promote", api.PromoteView.as_view(), name="release-plan-promote"),
    path(
        "releases/<str:code>/stages/<int:position>/notes",
        api.StageNoteView.as_view(),
        name="release-stage-notes",
    ),
]
