"""The entry module names the plugin in VERL_USE_EXTERNAL_MODULES once, keeping modules the user named."""

from precision_rl.verl_ext.main import with_plugin
from precision_rl.verl_ext.settings import PLUGIN_MODULE


def test_plugin_added_once():
    assert with_plugin(None) == PLUGIN_MODULE
    assert with_plugin("") == PLUGIN_MODULE
    assert with_plugin("mine") == f"{PLUGIN_MODULE},mine"
    assert with_plugin(f"mine,{PLUGIN_MODULE}") == f"mine,{PLUGIN_MODULE}"
