# The windows backend's native acceptance run, for a maintainer with a
# Windows 10 (2004 or later) or Windows 11 host, from a clone, in
# PowerShell 7:
#
#   pwsh -ExecutionPolicy Bypass -File scripts\windows-acceptance.ps1
#
# Builds terra in release mode and the probe (scripts\windows-probe\probe.rs,
# standard library only), then runs each probe inside the windows backend
# and, for the negative ones, its positive twin outside terra or inside a
# grant; then the commands people run: git, Python with multiprocessing,
# make (or mingw32-make), a compiler (the .NET Framework's csc.exe, present
# on every Windows 10 and 11), cmd.exe, a program that spawns children and
# one that leaves a background process, a repository of 50,000 files, a
# directory with a protected DACL; then Ctrl-C, a killed launcher and a
# killed terra run, each followed by the ledger, the ACEs and the profiles
# checked. Prints one PASS/FAIL line per check (SKIP when a tool is not
# installed, INFO for what is recorded but has no expected answer yet) and
# exits 1 when any failed.
#
# Needs: Rust (cargo, rustc) on PATH, a user that may create AppContainer
# profiles (any desktop user), network access for the network twin (the
# check is skipped, with a line saying so, when the host has none). git,
# Python and make are used when installed under Program Files (a per-user
# install is outside every grant: terra refuses it, naming the directory,
# and the check says so).
#
# Not run yet: written on Linux, where none of this can run
# (docs/sandbox-windows.md, "What has not been run").

#Requires -Version 7
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version 3

$repo = Split-Path -Parent $PSScriptRoot
Set-Location $repo

cargo build --release --locked --bin terra
if ($LASTEXITCODE -ne 0) { throw 'cargo build failed' }
$terra = Join-Path $repo 'target\release\terra.exe'

$work = Join-Path ([IO.Path]::GetTempPath()) ("terra-acc-" + [Guid]::NewGuid().ToString('N'))
$ws = Join-Path $work 'ws'
$outside = Join-Path $env:USERPROFILE ('.terra-acc-outside-' + [Guid]::NewGuid().ToString('N'))
New-Item -ItemType Directory -Path $ws, (Join-Path $ws 'secret'), (Join-Path $ws 'locked'), (Join-Path $ws 'deep\er'), $outside | Out-Null
Set-Content -Path (Join-Path $ws 'file.txt') -Value 'ok'
Set-Content -Path (Join-Path $ws 'secret\key.txt') -Value 'top-secret'
Set-Content -Path (Join-Path $ws 'locked\kept.txt') -Value 'read-only'
Set-Content -Path (Join-Path $outside 'private.txt') -Value 'private'

$probe = Join-Path $ws 'probe.exe'
rustc --edition 2021 -O -o $probe (Join-Path $repo 'scripts\windows-probe\probe.rs')
if ($LASTEXITCODE -ne 0) { throw 'building the probe failed' }

function Write-Policy([string]$name, [string]$network, [string[]]$extra) {
    $rules = @(
        '{ "access": "write", "path": { "root": "workspace", "relative": "" }, "scope": "tree" }',
        '{ "access": "read", "path": { "special": "minimal-runtime" }, "scope": "tree" }',
        '{ "access": "write", "path": { "root": "temp", "relative": "" }, "scope": "tree" }'
    ) + $extra
    $json = @"
{
  "formatVersion": 3,
  "filesystem": { "default": "deny", "rules": [
    $($rules -join ",`n    ")
  ] },
  "network": $network,
  "process": { "treeConfinement": "required" },
  "root": { "mode": "read-only" }
}
"@
    $path = Join-Path $work $name
    Set-Content -Path $path -Value $json -Encoding ascii
    return $path
}

$deny = Write-Policy 'deny.json' '{ "mode": "none" }' @(
    '{ "access": "deny", "path": { "root": "workspace", "relative": "secret" }, "scope": "tree" }',
    '{ "access": "deny-write", "path": { "root": "workspace", "relative": "locked" }, "scope": "tree" }'
)
$direct = Write-Policy 'direct.json' '{ "mode": "direct" }' @()
$mediated = Write-Policy 'mediated.json' '{ "mode": "mediated", "allow": [ { "protocol": "tcp", "host": "example.com", "port": 443 } ] }' @()

$script:failures = 0
function Result([string]$name, [bool]$ok, [string]$detail) {
    if ($ok) { Write-Host "PASS $name" } else { Write-Host "FAIL $name  $detail"; $script:failures++ }
}

function Gone([int]$id) {
    for ($i = 0; $i -lt 50; $i++) {
        if (-not (Get-Process -Id $id -ErrorAction SilentlyContinue)) { return $true }
        Start-Sleep -Milliseconds 100
    }
    return $false
}

# Runs terra (ARGS) in the workspace; returns @{ Code; Out; Err } with the
# raw bytes of standard output.
function Invoke-Terra([string[]]$terraArgs) {
    $psi = New-Object Diagnostics.ProcessStartInfo
    $psi.FileName = $terra
    foreach ($a in $terraArgs) { [void]$psi.ArgumentList.Add($a) }
    $psi.WorkingDirectory = $ws
    $psi.RedirectStandardOutput = $true
    $psi.RedirectStandardError = $true
    $psi.UseShellExecute = $false
    $p = [Diagnostics.Process]::Start($psi)
    $outStream = New-Object IO.MemoryStream
    $copy = $p.StandardOutput.BaseStream.CopyToAsync($outStream)
    $err = $p.StandardError.ReadToEnd()
    $p.WaitForExit()
    $copy.Wait()
    return @{ Code = $p.ExitCode; Out = $outStream.ToArray(); Err = $err }
}

function Inside([string]$policy, [string[]]$probeArgs) {
    return Invoke-Terra (@('run', '--policy', $policy, '--', $probe) + $probeArgs)
}

function Outside([string[]]$probeArgs) {
    & $probe @probeArgs *> $null
    return $LASTEXITCODE
}

function Acl-Count([string]$path) {
    return @((Get-Acl -LiteralPath $path).Access | Where-Object {
        $_.IdentityReference.Value -like 'S-1-15-2-*' -or $_.IdentityReference.Value -like 'APPLICATION PACKAGE AUTHORITY\*'
    }).Count
}

$mappings = 'HKCU:\Software\Classes\Local Settings\Software\Microsoft\Windows\CurrentVersion\AppContainer\Mappings'
function Terra-Profiles {
    if (-not (Test-Path $mappings)) { return 0 }
    return @(Get-ChildItem $mappings | Where-Object { (Get-ItemProperty $_.PSPath).Moniker -like 'terra.*' }).Count
}

$aclsBefore = Acl-Count $ws
$profilesBefore = Terra-Profiles

$ledgerDir = Join-Path $env:LOCALAPPDATA 'terra\state\ledger'
function Ledger-Count {
    if (-not (Test-Path $ledgerDir)) { return 0 }
    return @(Get-ChildItem $ledgerDir -Filter '*.ledger').Count
}

# ---- the dry run on this host: Windows paths, objects scanned, the
# workload's settings apart from the roles'
$r = Invoke-Terra @('run', '--backend', 'windows', '--dry-run', '--json', '--policy', $deny, '--', $probe, 'exit', '0')
$plan = $null
try { $plan = [Text.Encoding]::UTF8.GetString($r.Out) | ConvertFrom-Json } catch { }
Result 'dry run: Windows-canonical paths, objects scanned' ($r.Code -eq 0 -and $plan -and $plan.pathsWindowsCanonical -and $plan.objects.counted) $r.Err
Result 'dry run: a plain working directory and temp directory' ($plan -and -not $plan.workingDirectory.StartsWith('\\') -and -not $plan.environment.TEMP.StartsWith('\\')) "$($plan.workingDirectory) $($plan.environment.TEMP)"
Result 'dry run: the workload job has no process limit, the broker one process' ($plan -and $plan.processes.workload.job.activeProcessLimit -eq 0 -and $plan.processes.broker.job.activeProcessLimit -eq 1 -and $plan.processes.broker.win32k -eq 'locked down' -and $plan.processes.workload.win32k -eq 'allowed') ''
$gitExe = (Get-Command git.exe -ErrorAction SilentlyContinue)
if ($gitExe) {
    $r = Invoke-Terra @('run', '--backend', 'windows', '--dry-run', '--', 'git', 'status')
    Result 'dry run with the default policy: git status is a plan, not a refusal' ($r.Code -eq 0) $r.Err
}

# ---- files
$r = Inside $deny @('read', (Join-Path $ws 'file.txt'))
Result 'read inside the workspace (twin)' ($r.Code -eq 0) $r.Err
$r = Inside $deny @('read', (Join-Path $ws 'secret\key.txt'))
Result 'read a denied file is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('read', (Join-Path $outside 'private.txt'))
Result 'read outside every grant is refused' ($r.Code -eq 3 -and (Outside @('read', (Join-Path $outside 'private.txt'))) -eq 0) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('write', (Join-Path $ws 'new.txt'))
Result 'write inside the workspace (twin)' ($r.Code -eq 0) $r.Err
$r = Inside $deny @('write', (Join-Path $ws 'locked\kept.txt'))
Result 'write to a deny-write file is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('write', (Join-Path $ws 'locked\new.txt'))
Result 'create in a deny-write directory is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('delete', (Join-Path $ws 'locked\kept.txt'))
Result 'delete in a deny-write directory is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('rename', (Join-Path $ws 'locked'), (Join-Path $ws 'moved'))
Result 'moving a deny-write directory away is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('rename', (Join-Path $ws 'deep'), (Join-Path $ws 'deep2'))
Result 'renaming a plain directory (twin)' ($r.Code -eq 0) $r.Err
$junction = Join-Path $ws 'junction'
New-Item -ItemType Junction -Path $junction -Target $outside | Out-Null
$r = Inside $deny @('read', (Join-Path $junction 'private.txt'))
Result 'a junction in the workspace pointing outside carries no grant' ($r.Code -eq 3 -and (Acl-Count (Join-Path $outside 'private.txt')) -eq 0) "exit $($r.Code) $($r.Err)"
Remove-Item $junction
$r = Inside $deny @('write', (Join-Path $outside 'written.txt'))
Result 'write outside every grant is refused' ($r.Code -eq 3 -and -not (Test-Path (Join-Path $outside 'written.txt'))) "exit $($r.Code) $($r.Err)"

# ---- network none
$twin = Outside @('connect', 'example.com:443')
$r = Inside $deny @('connect', 'example.com:443')
if ($twin -eq 0) {
    Result 'network none: an outbound connect is refused' ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
} else {
    Write-Host 'SKIP network none: this host cannot reach example.com:443 outside terra either'
}
$r = Inside $deny @('connect', '127.0.0.1:135')
Result 'network none: a loopback connect (RPC endpoint mapper) is refused' ($r.Code -eq 3 -and (Outside @('connect', '127.0.0.1:135')) -eq 0) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('listen', '127.0.0.1:0')
Write-Host "INFO network none: listening on 127.0.0.1:0 inside exits $($r.Code) (a listener no one outside can reach)"
$r = Invoke-Terra @('run', '--policy', $direct, '--', $probe, 'exit', '0')
Result 'network direct is refused (not declared)' ($r.Code -eq 125 -and $r.Err -match 'network') $r.Err
$r = Invoke-Terra @('run', '--policy', $mediated, '--', $probe, 'exit', '0')
Result 'mediated networking is refused (no broker on Windows)' ($r.Code -eq 125) $r.Err
$r = Invoke-Terra @('run', '--allow-net', 'example.com:443', '--', $probe, 'exit', '0')
Result '--allow-net is refused' ($r.Code -eq 125) $r.Err

# ---- processes, console, exit codes
$system = Join-Path $env:SystemRoot 'System32\whoami.exe'
$r = Inside $deny @('spawn', $system)
Result 'the workload starts a child process (whoami.exe, which imports user32.dll)' ($r.Code -eq 0) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('console')
Result "the workload cannot attach the user's console" ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('controls')
$text = [Text.Encoding]::UTF8.GetString($r.Out)
$controls = @($r.Out | Where-Object { ($_ -lt 0x20 -and $_ -ne 0x0a -and $_ -ne 0x0d -and $_ -ne 0x09) -or $_ -eq 0x7f }).Count
Result 'the relay replaces control characters' ($r.Code -eq 0 -and $controls -eq 0 -and $text.Contains('^[[31mred') -and $text.Contains('hidden^Mshown') -and $text.Contains("crlf:`r`n") -and $text.Contains([char]0xfffd)) $text
Result 'the relay keeps UTF-8 intact' ($text.Contains("h$([char]0xe9)llo")) $text
$r = Inside $deny @('exit', '42')
Result "the workload's exit code is terra's" ($r.Code -eq 42) "exit $($r.Code)"
$bat = Join-Path $ws 'x.bat'
Set-Content -Path $bat -Value '@echo hi'
$r = Invoke-Terra @('run', '--policy', $deny, '--', $bat)
Result 'a batch file is refused' ($r.Code -eq 125 -and $r.Err -match 'batch') $r.Err

# ---- after the orderly runs above: no ACE left on the workspace, no profile left
$aclsAfter = Acl-Count $ws
Result 'orderly runs leave no AppContainer ACE on the workspace' ($aclsAfter -eq $aclsBefore) "before $aclsBefore after $aclsAfter"
$profilesAfter = Terra-Profiles
Result 'orderly runs leave no terra.* AppContainer profile' ($profilesAfter -eq $profilesBefore) "before $profilesBefore after $profilesAfter"

# ---- the commands people run
$cmd = Join-Path $env:SystemRoot 'System32\cmd.exe'
$r = Invoke-Terra @('run', '--policy', $deny, '--', $cmd, '/d', '/c', 'cd')
$cwd = [Text.Encoding]::UTF8.GetString($r.Out).Trim()
Result 'cmd.exe starts in the plain workspace path (no UNC refusal)' ($r.Code -eq 0 -and $cwd -eq $ws -and -not $r.Err.Contains('UNC')) "cwd '$cwd' $($r.Err)"
$r = Invoke-Terra @('run', '--policy', $deny, '--', $cmd, '/d', '/c', 'cmd /d /c cmd /d /c echo nested')
Result 'a process tree: cmd starts cmd starts cmd' ($r.Code -eq 0 -and [Text.Encoding]::UTF8.GetString($r.Out).Contains('nested')) $r.Err
$bgPid = Join-Path $ws 'bg.txt'
# The foreground probe sleeps two seconds, so the background one has
# written its pid before the workload (cmd) exits. (Paths with spaces would
# need quoting that cmd's start takes for a window title.)
$fgPid = Join-Path $ws 'fg.txt'
$r = Invoke-Terra @('run', '--policy', $deny, '--', $cmd, '/d', '/c', "start /b $probe sleep 120 $bgPid & $probe sleep 2 $fgPid")
for ($i = 0; $i -lt 50 -and -not (Test-Path $bgPid); $i++) { Start-Sleep -Milliseconds 100 }
$bg = if (Test-Path $bgPid) { [int](Get-Content $bgPid) } else { 0 }
Result 'a background process does not outlive the run' ($bg -ne 0 -and (Gone $bg)) "pid $bg"
Write-Host 'SKIP interactive shell: the windows backend relays no standard input yet (stdin is NUL; docs/sandbox-windows.md)'

$repo2 = Join-Path $ws 'repo'
New-Item -ItemType Directory -Path $repo2 | Out-Null
if ($gitExe -and $gitExe.Source -like "$env:ProgramFiles*") {
    & git -C $repo2 init -q
    Set-Content -Path (Join-Path $repo2 'a.txt') -Value 'a'
    $psiDir = $ws; $ws = $repo2
    $r = Invoke-Terra @('run', '--', 'git', 'status', '--short')
    $ws = $psiDir
    Result 'git status (default policy, git under Program Files)' ($r.Code -eq 0 -and [Text.Encoding]::UTF8.GetString($r.Out).Contains('a.txt')) $r.Err
} elseif ($gitExe) {
    $r = Invoke-Terra @('run', '--', 'git', '--version')
    Result "git installed per user ($($gitExe.Source)) is refused naming its directory" ($r.Code -eq 125 -and $r.Err -match 'Program Files') $r.Err
} else { Write-Host 'SKIP git: not installed' }

$py = Get-Command python.exe -ErrorAction SilentlyContinue
if ($py -and $py.Source -like "$env:ProgramFiles*") {
    $r = Invoke-Terra @('run', '--policy', $deny, '--', $py.Source, '-c', 'import multiprocessing as m
if __name__ == "__main__":
    with m.Pool(2) as p: print(sum(p.map(abs, [-1, -2, -3])))')
    Result 'python multiprocessing (a pool of two workers)' ($r.Code -eq 0 -and [Text.Encoding]::UTF8.GetString($r.Out).Trim() -eq '6') $r.Err
} elseif ($py) {
    $r = Invoke-Terra @('run', '--policy', $deny, '--', $py.Source, '--version')
    Result "python installed per user ($($py.Source)) is refused naming its directory" ($r.Code -eq 125 -and $r.Err -match 'Program Files') $r.Err
} else { Write-Host 'SKIP python: not installed' }

$make = @(Get-Command make.exe, mingw32-make.exe -ErrorAction SilentlyContinue) | Select-Object -First 1
if ($make) {
    Set-Content -Path (Join-Path $ws 'Makefile') -Value "all: one two`n`none:`n`t@echo one> one.out`ntwo:`n`t@echo two> two.out`n"
    $r = Invoke-Terra @('run', '--policy', $deny, '--', $make.Source, '-j2')
    Result "make -j2 ($($make.Name))" ($r.Code -eq 0 -and (Test-Path (Join-Path $ws 'one.out')) -and (Test-Path (Join-Path $ws 'two.out'))) $r.Err
} else { Write-Host 'SKIP make: neither make nor mingw32-make is installed' }

$csc = Join-Path $env:SystemRoot 'Microsoft.NET\Framework64\v4.0.30319\csc.exe'
if (Test-Path $csc) {
    Set-Content -Path (Join-Path $ws 'hello.cs') -Value 'class H { static void Main() { System.Console.WriteLine("compiled"); } }'
    $r = Invoke-Terra @('run', '--policy', $deny, '--', $csc, '/nologo', '/out:hello.exe', 'hello.cs')
    Result 'a compiler (csc.exe) builds into the workspace' ($r.Code -eq 0 -and (Test-Path (Join-Path $ws 'hello.exe'))) "$([Text.Encoding]::UTF8.GetString($r.Out)) $($r.Err)"
} else { Write-Host 'SKIP compiler: the .NET Framework csc.exe is not installed' }

# ---- grants scale: a repository of 50,000 files, a protected DACL inside
$big = Join-Path $ws 'big'
for ($d = 0; $d -lt 50; $d++) {
    $dir = Join-Path $big ('d{0:d2}' -f $d)
    New-Item -ItemType Directory -Path $dir -Force | Out-Null
    for ($f = 0; $f -lt 1000; $f++) { [IO.File]::WriteAllText((Join-Path $dir ('f{0:d4}.txt' -f $f)), 'x') }
}
$deep = Join-Path $big 'd49\f0999.txt'
$t = [Diagnostics.Stopwatch]::StartNew()
$r = Inside $deny @('read', $deep)
$t.Stop()
Result "a 50,000-file workspace runs (no object cap; $([int]$t.Elapsed.TotalSeconds) s)" ($r.Code -eq 0) $r.Err
Result 'after it, no package ACE is left on a file deep in the tree' ((Acl-Count $deep) -eq 0) ''
$prot = Join-Path $ws 'protected'
New-Item -ItemType Directory -Path $prot | Out-Null
Set-Content -Path (Join-Path $prot 'p.txt') -Value 'p'
icacls $prot /inheritance:d | Out-Null
$r = Inside $deny @('read', (Join-Path $prot 'p.txt'))
Result 'a file below a protected DACL is readable (explicit ACE on the protected directory)' ($r.Code -eq 0) $r.Err
Result 'and that ACE is removed afterwards' ((Acl-Count $prot) -eq 0) ''

# ---- the launcher's job check: started by hand, in no job of terra's
$psi = New-Object Diagnostics.ProcessStartInfo
$psi.FileName = $terra
foreach ($a in @('__sandbox_launcher', '--canary', (Join-Path $work 'c'), '--job', '0x4', '--', $probe, 'exit', '0')) { [void]$psi.ArgumentList.Add($a) }
$psi.RedirectStandardInput = $true
$psi.RedirectStandardError = $true
$psi.UseShellExecute = $false
$p = [Diagnostics.Process]::Start($psi)
$p.StandardInput.Close()
$err = $p.StandardError.ReadToEnd()
$p.WaitForExit()
Result "a launcher outside terra run's own job refuses" ($p.ExitCode -eq 125) $err

# ---- killing the launcher or terra run leaves no worker
function Start-Sleeper([string]$pidFile) {
    $psi = New-Object Diagnostics.ProcessStartInfo
    $psi.FileName = $terra
    foreach ($a in @('run', '--policy', $deny, '--', $probe, 'sleep', '120', $pidFile)) { [void]$psi.ArgumentList.Add($a) }
    $psi.WorkingDirectory = $ws
    $psi.UseShellExecute = $false
    $run = [Diagnostics.Process]::Start($psi)
    for ($i = 0; $i -lt 100 -and -not (Test-Path $pidFile); $i++) { Start-Sleep -Milliseconds 100 }
    $worker = if (Test-Path $pidFile) { [int](Get-Content $pidFile) } else { 0 }
    $launcher = @(Get-CimInstance Win32_Process -Filter "ParentProcessId=$($run.Id)" | Where-Object { $_.Name -eq 'terra.exe' })
    return @{ Run = $run; Worker = $worker; Launcher = if ($launcher.Count -gt 0) { $launcher[0].ProcessId } else { 0 } }
}

$s = Start-Sleeper (Join-Path $ws 'pid1.txt')
if ($s.Worker -and $s.Launcher) {
    Stop-Process -Id $s.Launcher -Force
    Result 'killing the launcher ends the worker' (Gone $s.Worker) "worker $($s.Worker)"
    $s.Run.WaitForExit(10000) | Out-Null
} else { Result 'killing the launcher ends the worker' $false 'the sleeper did not start' }

$s = Start-Sleeper (Join-Path $ws 'pid2.txt')
if ($s.Worker -and $s.Launcher) {
    Stop-Process -Id $s.Run.Id -Force
    Result 'killing terra run ends the launcher and the worker' ((Gone $s.Launcher) -and (Gone $s.Worker)) "launcher $($s.Launcher) worker $($s.Worker)"
} else { Result 'killing terra run ends the launcher and the worker' $false 'the sleeper did not start' }

# The next run sweeps what the killed ones left.
$r = Inside $deny @('exit', '0')
Result 'after two killed runs, the next run leaves the ledger empty' ($r.Code -eq 0 -and (Ledger-Count) -eq 0) "ledgers: $(Ledger-Count)"
Result 'and no terra.* profile and no package ACE' ((Terra-Profiles) -eq $profilesBefore -and (Acl-Count $ws) -eq $aclsBefore) "profiles $(Terra-Profiles) acls $(Acl-Count $ws)"

# ---- Ctrl-C: sent to a terra run in a console of its own
$ctrlC = @'
param([int]$target)
Add-Type -Namespace W -Name C -MemberDefinition @"
[DllImport("kernel32.dll")] public static extern bool FreeConsole();
[DllImport("kernel32.dll")] public static extern bool AttachConsole(uint p);
[DllImport("kernel32.dll")] public static extern bool SetConsoleCtrlHandler(System.IntPtr h, bool add);
[DllImport("kernel32.dll")] public static extern bool GenerateConsoleCtrlEvent(uint e, uint g);
"@
[W.C]::FreeConsole() | Out-Null
if (-not [W.C]::AttachConsole([uint32]$target)) { exit 2 }
[W.C]::SetConsoleCtrlHandler([IntPtr]::Zero, $true) | Out-Null
[W.C]::GenerateConsoleCtrlEvent(0, 0) | Out-Null
exit 0
'@
$ctrlScript = Join-Path $work 'ctrlc.ps1'
Set-Content -Path $ctrlScript -Value $ctrlC
$pidFile = Join-Path $ws 'pid3.txt'
$run = Start-Process -FilePath $terra -ArgumentList @('run', '--policy', $deny, '--', $probe, 'sleep', '120', $pidFile) -WorkingDirectory $ws -PassThru
for ($i = 0; $i -lt 100 -and -not (Test-Path $pidFile); $i++) { Start-Sleep -Milliseconds 100 }
$worker = if (Test-Path $pidFile) { [int](Get-Content $pidFile) } else { 0 }
& pwsh -NoProfile -File $ctrlScript -target $run.Id
$run.WaitForExit(15000) | Out-Null
Result 'Ctrl-C ends the workload' ($worker -ne 0 -and (Gone $worker)) "worker $worker"
Result 'Ctrl-C leaves the ledger empty' ((Ledger-Count) -eq 0) "ledgers: $(Ledger-Count)"
Result 'Ctrl-C leaves no terra.* profile and no package ACE' ((Terra-Profiles) -eq $profilesBefore -and (Acl-Count $ws) -eq $aclsBefore) "profiles $(Terra-Profiles) acls $(Acl-Count $ws)"

Remove-Item -Recurse -Force $work, $outside -ErrorAction SilentlyContinue
if ($script:failures -gt 0) {
    Write-Host "$($script:failures) check(s) failed"
    exit 1
}
Write-Host 'all checks passed'
