"""Starts TOOL ARGS... reading a stdin that never ends, sends it SIGSEGV once
it is waiting, and prints what it wrote to stderr (the crash report)."""
import signal, subprocess, sys, time

p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE, text=True)
time.sleep(1.5)
p.send_signal(signal.SIGSEGV)
_, err = p.communicate(timeout=60)
sys.stdout.write(err)
print(f"exit {p.returncode}")
