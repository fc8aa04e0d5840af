from django.urls import path

from .api import ApiTokenListView, ApiTokenRevokeView

urlpatterns = [
    path("tokens", ApiTokenListView.as_view(), name="token-list"),
    path("tokens/<str:prefix>/revoke", ApiTokenRevokeView.as_view(), name="token-revoke"),
]
