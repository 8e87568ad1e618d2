"""Server config files: TOML, YAML, dicts; one-line errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.launch.server_config import (
    ConfigError,
    load_server_configs,
    server_configs_from_data,
)

TOML = """
[[server]]
name = "plain"
model = "meta-llama/Llama-3.1-8B-Instruct"
args = ["--tp", "2"]
env = { SGLANG_FOO = "1" }
gpus = 2

[[server]]
name = "mtp"
model = "m"
sim_profile = "h100-llama8b"
"""

YAML = """
server:
  - name: plain
    model: m
    args: ["--tp", "2"]
    gpus: 2
"""


def test_toml_loads(tmp_path: Path) -> None:
    path = tmp_path / "servers.toml"
    path.write_text(TOML)
    plain, mtp = load_server_configs(path)
    assert plain.args == ("--tp", "2") and plain.env == {"SGLANG_FOO": "1"} and plain.gpus == 2
    assert mtp.sim_profile == "h100-llama8b" and mtp.gpus is None


def test_yaml_loads(tmp_path: Path) -> None:
    path = tmp_path / "servers.yaml"
    path.write_text(YAML)
    (plain,) = load_server_configs(path)
    assert plain.name == "plain" and plain.args == ("--tp", "2")


def test_errors_name_file_and_field_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[[server]]\nname = "a"\nmodel = "m"\ngpus = -1\nargs = "--tp 2"\n'
        '[[server]]\nname = "b"\nmodel = "m"\ncolour = "red"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_server_configs(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert f"{path}: server[0].gpus: Input should be greater than or equal to 0" in lines
    assert f"{path}: server[0].args: Input should be a valid list" in lines
    assert f"{path}: server[1].colour: Extra inputs are not permitted" in lines
    assert "Traceback" not in str(info.value)


def test_duplicate_names() -> None:
    data = {"server": [{"name": "x", "model": "m"}, {"name": "x", "model": "m2"}]}
    with pytest.raises(ConfigError, match=r"<data>: server\[1\].name: duplicate name 'x'"):
        server_configs_from_data(data)


@pytest.mark.parametrize("name", ["a/b", "..\\evil"])
def test_path_separator_in_name(name: str) -> None:
    with pytest.raises(ConfigError, match=r"server\[0\].name: .*path separator"):
        server_configs_from_data({"server": [{"name": name, "model": "m"}]})


def test_syntax_errors_are_one_line(tmp_path: Path) -> None:
    bad_toml = tmp_path / "x.toml"
    bad_toml.write_text("[[server]\n")
    with pytest.raises(ConfigError, match=r"x.toml: invalid TOML"):
        load_server_configs(bad_toml)
    bad_yaml = tmp_path / "x.yaml"
    bad_yaml.write_text("server: [\n  - {name: a\n")
    with pytest.raises(ConfigError) as info:
        load_server_configs(bad_yaml)
    assert len(str(info.value).splitlines()) == 1 and "invalid YAML" in str(info.value)


def test_other_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_server_configs(tmp_path / "missing.toml")
    ini_file = tmp_path / "x.ini"
    ini_file.write_text("[server]")
    with pytest.raises(ConfigError, match=r"x.ini: unsupported server config file type '.ini'"):
        load_server_configs(ini_file)
    bad_json = tmp_path / "x.json"
    bad_json.write_text("{")
    with pytest.raises(ConfigError, match=r"x.json: invalid JSON"):
        load_server_configs(bad_json)
    with pytest.raises(ConfigError, match="unknown top-level key"):
        server_configs_from_data({"servers": []})


def test_python_list_api() -> None:
    (cfg,) = server_configs_from_data([{"name": "a", "model": "m", "env": {"K": "v"}}])
    assert cfg.env == {"K": "v"}


def test_command_server_config() -> None:
    (cfg,) = server_configs_from_data(
        [
            {
                "name": "llama",
                "model": "small",
                "command": ["llama-server", "-a", "{model}", "--host={host}", "--port", "{port}"],
                "health": "/health",
            }
        ]
    )
    assert cfg.launch_argv(host="127.0.0.1", port=8123) == [
        "llama-server",
        "-a",
        "small",
        "--host=127.0.0.1",
        "--port",
        "8123",
    ]
    # Braces that are not placeholders (a JSON argument) pass through untouched.
    (js,) = server_configs_from_data(
        [{"name": "j", "model": "m", "command": ["srv", "{port}", '{"a": 1}']}]
    )
    assert js.launch_argv(host="h", port=1)[2] == '{"a": 1}'


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": []}, "server[0].command: must be a non-empty list"),
        ({"command": ["srv", "{prot}"]}, "server[0].command: unknown placeholder(s) {prot}"),
        ({"command": ["srv", "--port", "8000"]}, "server[0].command: must contain {port}"),
        ({"command": "srv {port}"}, "server[0].command: Input should be a valid list"),
        (
            {"command": ["srv", "{port}"], "args": ["--tp", "2"]},
            "server[0]: args: go to sglang.launch_server and are not used with 'command'",
        ),
        ({"health": "/health"}, "server[0]: health: only used with 'command'"),
        (
            {"command": ["srv", "{port}"], "health": "health"},
            "server[0].health: 'health' is not a path; give one like '/health'",
        ),
    ],
)
def test_command_errors_name_the_field(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        server_configs_from_data({"server": [{"name": "a", "model": "m", **entry}]}, source="s")
    assert str(info.value) == f"s: {message}" or str(info.value).startswith(f"s: {message}")
