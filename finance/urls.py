"""/finance/…: staff-only reports, each with /download.csv and /download.parquet of the same table."""

from django.urls import path

from . import views

app_name = "finance"

urlpatterns = [path("", views.index, name="index")]
for _name in views.REPORTS:
    urlpatterns += [
        path(f"{_name}/", views.page_view(_name), name=_name),
        path(f"{_name}/download.<str:fmt>", views.download_view(_name), name=f"{_name}-download"),
    ]
urlpatterns.append(path("disputes/<int:pk>/resolve", views.resolve, name="dispute-resolve"))
