"""The shell guard: protected paths in shell commands, and outright dangerous commands."""

from __future__ import annotations

import os

import pytest

from corvid_actors.tools.shell_guard import GuardSettings, blocked_command, protected_write_target


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / "build").mkdir()
    (root / "build" / "out.js").write_text("//\n")
    (root / ".env").write_text("SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "corvid.db").write_text("db")
    return root


#: every shell write form from the issue (and the original's BASH_WRITE_OPERATORS);
#: {t} is the protected target, {base} its file name
WRITE_FORMS = [
    "echo x > {t}",
    "echo x >> {t}",
    "echo x 2> {t}",
    "echo x &> {t}",
    "echo x >{t}",
    "echo x>>{t}",
    "echo x >| {t}",
    "echo x > '{t}'",
    'echo x > "{t}"',
    "printf x | tee {t}",
    "printf x | tee -a {t}",
    "sed -i s/a/b/ {t}",
    "sed -i.bak -e s/a/b/ {t}",
    "cp src/a.py {t}",
    "mv src/a.py {t}",
    "rm {t}",
    "rm -f {t}",
    "dd if=/dev/zero of={t} count=1",
    "truncate -s 0 {t}",
    "ln -sf src/a.py {t}",
    "install -m 644 src/a.py {t}",
    "rsync src/a.py {t}",
    "chmod 777 {t}",
    "chown nobody {t}",
    "python -c \"open('{t}','w').write('x')\"",
    "python3 -c \"import os; os.remove('{t}')\"",
    "node -e \"require('fs').writeFileSync('{t}','x')\"",
    "perl -i -pe 's/a/b/' {t}",
    "perl -e \"unlink '{t}'\"",
    "ruby -i -pe 'x' {t}",
    "ruby -e \"File.write('{t}','x')\"",
    "php -r \"file_put_contents('{t}','x');\"",
    "find . -name '{base}' -delete",
    "find . -name '{base}' -exec rm {{}} \\;",
    "curl -o {t} http://127.0.0.1:1/x",
    "curl -o{t} http://127.0.0.1:1/x",
    "curl --output={t} http://127.0.0.1:1/x",
    "wget -O {t} http://127.0.0.1:1/x",
    "env FOO=1 rm {t}",
    "command rm {t}",
    "nohup rm {t}",
    "echo {t} | xargs rm",
    "sh -c 'rm {t}'",
    'bash -c "echo x > {t}"',
    "sh -c \"bash -c 'rm {t}'\"",
    "eval rm {t}",
    "echo ok; rm {t}",
    "true && rm {t}",
    "false || rm {t}",
    "echo ok\nrm {t}",
    "echo `rm {t}`",
    "echo $(rm {t})",
    "rm ./src/../{t}",
    "cat {t}",
]

TARGETS = [".env", ".git/config", "corvid.db"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", WRITE_FORMS)
def test_every_write_form_against_a_protected_path_is_caught(project, form, target):
    command = form.format(t=target, base=os.path.basename(target))
    assert protected_write_target(command, project) is not None, command


def test_the_reported_target_is_the_protected_path(project):
    assert protected_write_target("dd if=x of=.env", project) == ".env"
    assert protected_write_target("echo x 2>.git/config", project) == ".git/config"
    assert protected_write_target("sh -c 'cp a corvid.db'", project) == "corvid.db"


@pytest.mark.parametrize(
    "command",
    [
        "cat '.e''nv'",  # quote concatenation
        "cat .e*",  # glob the shell would expand
        "cat .{env,x}",  # brace expansion (bash)
        "cat $'\\x2eenv'",  # ANSI-C quoting
        "cat ~/.ssh/id_rsa",
        "cp key.pem /tmp/x",
        "tar czf /tmp/x.tgz .git",
    ],
)
def test_obfuscated_or_indirect_mentions_are_caught(project, command):
    assert protected_write_target(command, project) is not None


def test_a_symlink_to_a_protected_file_is_caught(project):
    os.symlink(project / ".env", project / "notes.txt")
    assert protected_write_target("echo x > notes.txt", project) == "notes.txt"


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf .",
        "rm -r ./",
        "rm -rf src/..",
        "find . -delete",
        "find -name '*.tmp' -exec rm {} +",
        "git clean -fdx",
        "chmod -R 755 .",
        "chmod -R -w .",
        "chown -R nobody .",
        "rsync -a --delete build/ ./",
        "mv . ../elsewhere",
        "bash -c 'rm -rf .'",
        "python3 -c \"import os; os.system('rm -rf .')\"",
    ],
)
def test_bulk_operations_over_a_tree_with_protected_paths_are_caught(project, command):
    assert protected_write_target(command, project) is not None, command


def test_bulk_operations_reach_into_subdirectories(project):
    (project / "config").mkdir()
    (project / "config" / ".env.local").write_text("K=1\n")
    assert protected_write_target("rm -rf config", project) == "config/.env.local"
    assert protected_write_target("rm -rf conf*", project) == "config/.env.local"
    assert protected_write_target("mv config settings", project) == "config/.env.local"
    assert protected_write_target("cp -r config copy", project) == "config/.env.local"


def test_dependency_trees_are_not_searched_for_vendored_fixtures(project):
    fixtures = project / "node_modules" / "tls-lib" / "test"
    fixtures.mkdir(parents=True)
    (fixtures / "key.pem").write_text("-----BEGIN-----\n")
    assert protected_write_target("rm -rf node_modules", project) is None
    assert protected_write_target("rm -rf node_modules/tls-lib", project) is None
    # named directly, it is still protected
    assert protected_write_target("cat node_modules/tls-lib/test/key.pem", project) is not None


def test_copying_a_tree_with_protected_names_into_the_project_is_caught(project, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / ".env").write_text("K=1\n")
    assert protected_write_target(f"cp -r {other} vendored", project) is not None


def test_a_tree_too_large_to_check_is_refused(project):
    for index in range(3):
        (project / "build" / f"chunk{index}.js").write_text("//\n")
    tight = GuardSettings(walk_max_entries=2)
    assert protected_write_target("rm -rf build", project) is None
    hit = protected_write_target("rm -rf build", project, settings=tight)
    assert hit is not None and "too many files" in hit


@pytest.mark.parametrize(
    "command",
    [
        "ls",
        "ls -la src",
        "git status",
        "git log --oneline -5",
        "git add src/a.py .gitignore",
        "echo hi > out.txt",
        "cat src/a.py",
        "pytest -q",
        "grep -rn foo src",
        "npm test && echo ok",
        "rm -rf build",
        "find src -name '*.pyc' -delete",
        "git clean -n",
        "python -c \"print(1)\"",
        "cp -r src src2",
        "chmod -R 755 build",
        "echo 'a;b' | wc -c",
    ],
)
def test_benign_commands_are_allowed(project, command):
    assert protected_write_target(command, project) is None


def test_custom_patterns_are_the_ones_used(project):
    (project / "secrets").mkdir()
    patterns = ("secrets/",)
    assert protected_write_target("cat secrets/token", project, patterns) == "secrets/token"
    assert protected_write_target("rm -rf .", project, patterns) == "secrets"
    assert protected_write_target("cat .env", project, patterns) is None


def test_unbalanced_quotes_still_get_the_mention_check(project):
    assert protected_write_target("echo 'x > .env", project) == ".env"


# --- blocked_command -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "sudo ls",
        "sudo -u root rm x",
        "env sudo ls",
        "doas ls",
        "su -c ls",
        "bash -c 'sudo ls'",
        "rm -rf /",
        "rm -fr /*",
        "rm -r -f //",
        "rm -rf ~",
        "rm -rf --no-preserve-root /x",
        "mkfs /dev/sda1",
        "mkfs.ext4 /dev/sda1",
        "dd if=/dev/zero of=/dev/sda",
        "echo x > /dev/sda",
        "shutdown -h now",
        "reboot",
        "systemctl poweroff",
        "killall node",
        "chmod 777 /",
        "chmod -R 777 /",
        ":(){ :|:& };:",
        "ls; sudo rm x",
    ],
)
def test_dangerous_commands_are_blocked(command):
    reason = blocked_command(command)
    assert reason is not None and reason.startswith("Blocked dangerous command")


@pytest.mark.parametrize(
    "command",
    [
        "echo sudo",
        "grep -rn reboot src",
        "rm -rf build",
        "rm -rf *",
        "dd if=a of=b",
        "echo x > /dev/null",
        "echo x 2>/dev/stderr",
        "chmod 777 out.txt",
        "git status",
        "ls 'unbalanced",
    ],
)
def test_ordinary_commands_are_not_blocked(command):
    assert blocked_command(command) is None
