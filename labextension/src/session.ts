/**
 * What the session's server says about its own Slurm job: its end
 * (`{base}portal/api/session`) and its GPUs' use (`{base}portal/api/gpus`),
 * and how the status bar words them. Pure but for the two requests.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * `GET {base}portal/api/session`: the job's end, as Slurm has it.
 */
export interface ISession {
  job_id: string | null;
  /** ISO 8601, or null when Slurm cannot say (then `reason` says why). */
  end: string | null;
  seconds_left: number | null;
  /** Minutes before the end that the notice is shown (0: never). */
  warn_minutes: number;
  /** The hub's page where the session is extended. */
  extend_url: string;
  reason?: string;
}

/**
 * One GPU of the slice, as `GET {base}portal/api/gpus` lists it.
 */
export interface IGpu {
  index: number;
  name: string;
  /** Percent, or null when the GPU does not say. */
  utilization: number | null;
  memory_used_mb: number | null;
  memory_total_mb: number | null;
}

/**
 * `GET {base}portal/api/gpus`: the slice's GPUs, or why there are none.
 */
export interface IGpus {
  gpus: IGpu[];
  reason?: string;
}

/**
 * The minutes before the end at which the notice is shown again, after the
 * first at `warn_minutes`.
 */
export const LAST_WARNING_MINUTES = 5;

async function getJSON<T>(
  settings: ServerConnection.ISettings,
  path: string,
  query: Record<string, string>
): Promise<T> {
  // Polled by the page itself: not the user's activity, which the hub's
  // idle check counts.
  const url =
    URLExt.join(settings.baseUrl, path) +
    URLExt.objectToQueryString({ ...query, no_track_activity: '1' });
  const response = await ServerConnection.makeRequest(
    url,
    { cache: 'no-store' },
    settings
  );
  if (!response.ok) {
    throw await ServerConnection.ResponseError.create(response);
  }
  return (await response.json()) as T;
}

/**
 * The session's end. `fresh`: read from Slurm at most 2 s ago (a tab opened
 * or focused again, perhaps after an extension); else at most 20 s ago.
 */
export function getSession(
  settings: ServerConnection.ISettings,
  fresh = false
): Promise<ISession> {
  return getJSON<ISession>(
    settings,
    'portal/api/session',
    fresh ? { fresh: '1' } : {}
  );
}

/**
 * The slice's GPUs and their use.
 */
export function getGpus(settings: ServerConnection.ISettings): Promise<IGpus> {
  return getJSON<IGpus>(settings, 'portal/api/gpus', {});
}

/**
 * A duration as the status bar and the notice word it: "3 h 05 min",
 * "12 min", "less than a minute" (the hub's session card words it alike).
 */
export function formatDuration(seconds: number): string {
  const minutes = Math.floor(Math.max(seconds, 0) / 60);
  if (minutes < 1) {
    return 'less than a minute';
  }
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const rest = String(minutes % 60).padStart(2, '0');
  return `${Math.floor(minutes / 60)} h ${rest} min`;
}

/**
 * The status bar's time left: "3 h 05 min left", or "ending" at the end.
 */
export function formatTimeLeft(seconds: number): string {
  return seconds > 0 ? `${formatDuration(seconds)} left` : 'ending';
}

function gigabytes(mb: number): string {
  const gb = mb / 1024;
  return gb < 10 ? gb.toFixed(1) : String(Math.round(gb));
}

function gpuUse(
  utilization: number | null,
  usedMb: number | null,
  totalMb: number | null
): string {
  const percent = utilization === null ? '?' : String(Math.round(utilization));
  const memory =
    usedMb === null || totalMb === null
      ? ''
      : `, ${gigabytes(usedMb)}/${gigabytes(totalMb)} GB`;
  return `${percent} %${memory}`;
}

function sum(values: (number | null)[]): number | null {
  return values.some(v => v === null)
    ? null
    : values.reduce<number>((total, v) => total + (v as number), 0);
}

/**
 * The status bar's GPU use: `text` ("GPU 0: 35 %, 2.1/16 GB"; several GPUs
 * summed, their average use) and `title`, one line per GPU, or the reason
 * there is no data.
 */
export function formatGpus(model: IGpus): { text: string; title: string } {
  const gpus = model.gpus ?? [];
  if (!gpus.length) {
    return {
      text: 'no GPU data',
      title: model.reason || 'This session has no GPU'
    };
  }
  const lines = gpus.map(
    g =>
      `GPU ${g.index} (${g.name}): ` +
      gpuUse(g.utilization, g.memory_used_mb, g.memory_total_mb)
  );
  if (gpus.length === 1) {
    const g = gpus[0];
    return {
      text: `GPU ${g.index}: ${gpuUse(g.utilization, g.memory_used_mb, g.memory_total_mb)}`,
      title: lines[0]
    };
  }
  const utilization = sum(gpus.map(g => g.utilization));
  const text =
    `${gpus.length} GPUs: ` +
    gpuUse(
      utilization === null ? null : utilization / gpus.length,
      sum(gpus.map(g => g.memory_used_mb)),
      sum(gpus.map(g => g.memory_total_mb))
    );
  return { text, title: lines.join('\n') };
}

/**
 * Which notices are due: `notify` when `secondsLeft` has just crossed a
 * threshold (`warnMinutes`, then LAST_WARNING_MINUTES) not yet warned of;
 * `warned`, the thresholds crossed, to pass to the next call. Thresholds
 * the end has moved away from again (an extension) are forgotten, so they
 * warn again when crossed again; `active` says whether any is crossed now.
 */
export function warningDue(
  secondsLeft: number,
  warnMinutes: number,
  warned: ReadonlySet<number>
): { notify: boolean; active: boolean; warned: Set<number> } {
  const thresholds = [warnMinutes, LAST_WARNING_MINUTES].filter(
    minutes => minutes > 0 && minutes <= warnMinutes
  );
  const crossed = thresholds.filter(minutes => secondsLeft <= minutes * 60);
  if (!crossed.length) {
    return { notify: false, active: false, warned: new Set() };
  }
  // Crossing several at once (a tab opened late) warns once, for the nearest.
  const notify = !warned.has(Math.min(...crossed));
  return { notify, active: true, warned: new Set(crossed) };
}
