# The windows backend's native acceptance run, for a maintainer with a
# Windows 10 (2004 or later) or Windows 11 host, from a clone, in
# PowerShell 7:
#
#   pwsh -ExecutionPolicy Bypass -File scripts\windows-acceptance.ps1
#
# Builds terra in release mode and the probe (scripts\windows-probe\probe.rs,
# standard library only, so it starts under the worker's Win32k lockdown),
# then runs each probe inside the windows backend and, for the negative
# ones, its positive twin outside terra or inside a grant. Prints one
# PASS/FAIL line per check (INFO for what is recorded but has no expected
# answer yet) and exits 1 when any failed.
#
# Needs: Rust (cargo, rustc) on PATH, a user that may create AppContainer
# profiles (any desktop user), network access for the network twin (the
# check is skipped, with a line saying so, when the host has none).
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

# ---- the dry run on this host: Windows paths, objects counted
$r = Invoke-Terra @('run', '--backend', 'windows', '--dry-run', '--json', '--policy', $deny, '--', $probe, 'exit', '0')
$plan = $null
try { $plan = [Text.Encoding]::UTF8.GetString($r.Out) | ConvertFrom-Json } catch { }
Result 'dry run: Windows-canonical paths, objects counted' ($r.Code -eq 0 -and $plan -and $plan.pathsWindowsCanonical -and $plan.objects.counted) $r.Err

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
Result 'the worker cannot start a child process' ($r.Code -eq 3 -and (Outside @('spawn', $system)) -eq 0) "exit $($r.Code) $($r.Err)"
$r = Inside $deny @('console')
Result "the worker cannot attach the user's console" ($r.Code -eq 3) "exit $($r.Code) $($r.Err)"
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
function Gone([int]$id) {
    for ($i = 0; $i -lt 50; $i++) {
        if (-not (Get-Process -Id $id -ErrorAction SilentlyContinue)) { return $true }
        Start-Sleep -Milliseconds 100
    }
    return $false
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

Write-Host "INFO after the two killed runs (not orderly): $(Terra-Profiles) terra.* profiles (their ACEs and profiles stay, naming SIDs no token will carry again)"

Remove-Item -Recurse -Force $work, $outside -ErrorAction SilentlyContinue
if ($script:failures -gt 0) {
    Write-Host "$($script:failures) check(s) failed"
    exit 1
}
Write-Host 'all checks passed'
