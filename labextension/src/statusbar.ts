/**
 * The session's time left and its GPUs' use in JupyterLab's status bar, and
 * the notice before the end, with a link to extend the session.
 *
 * The end is Slurm's (`{base}portal/api/session`), asked every minute, when
 * the page opens and when it is shown again (after an extension in another
 * tab, perhaps); between two answers the time left counts down here. The
 * GPUs' use (`{base}portal/api/gpus`) is asked every 10 s while the page is
 * shown.
 */
import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import {
  formatDuration,
  formatGpus,
  formatTimeLeft,
  getGpus,
  getSession,
  ISession,
  warningDue
} from './session';

/** How often the end is asked for, in ms (the server asks Slurm every 20 s at most). */
const SESSION_INTERVAL = 60_000;
/** How often the GPUs' use is asked for while the page is shown, in ms. */
const GPUS_INTERVAL = 10_000;
/** How often the time left shown counts down, in ms. */
const TICK_INTERVAL = 10_000;
/**
 * The browser's own desktop notification (the Notification API, on this
 * session's origin), once the user allowed it; JupyterLab's in-page notice
 * is shown either way. The tag makes a repeated notice replace the last.
 */
export function desktopNotice(title: string, body: string): void {
  const desktop = window.Notification;
  if (desktop && desktop.permission === 'granted') {
    new desktop(title, { body, tag: 'portal-session-ending' });
  }
}

/** A change of the end (an extension) that replaces the notice, in ms. */
const END_MOVED = 60_000;

/**
 * A text item of the status bar.
 */
export class StatusText extends Widget {
  constructor(className: string) {
    super({ node: document.createElement('span') });
    this.addClass('jp-StatusBar-TextItem');
    this.addClass(className);
  }

  set(text: string, title: string): void {
    this.node.textContent = text;
    this.node.title = title;
  }
}

/**
 * Open a page of the hub (`url`: absolute, or a path of this origin) in a new tab.
 */
export function openHubPage(url: string): void {
  const target = new URL(url, window.location.href);
  if (target.protocol === 'http:' || target.protocol === 'https:') {
    window.open(target.href, '_blank', 'noopener');
  }
}

/**
 * Follows the session's end and GPUs: the two status bar items and the notice.
 */
export class SessionStatus {
  readonly timeLeft = new StatusText('jp-portal-timeleft');
  readonly gpus = new StatusText('jp-portal-gpus');

  constructor(settings: ServerConnection.ISettings) {
    this._settings = settings;
    this.timeLeft.set('time left …', 'Asking Slurm when this session ends');
    this.gpus.set('GPU …', 'Asking for the GPUs of this session');
    this.timeLeft.addClass('jp-mod-highlighted');
    this.timeLeft.node.addEventListener('click', () => {
      if (this._session) {
        openHubPage(this._session.extend_url);
      }
    });

    this._sessionPoll = new Poll({
      factory: () => this._fetchSession(),
      frequency: { interval: SESSION_INTERVAL, backoff: true, max: 300_000 },
      standby: 'never',
      name: 'portal-session:end'
    });
    this._gpusPoll = new Poll({
      factory: () => this._fetchGpus(),
      frequency: { interval: GPUS_INTERVAL, backoff: true, max: 60_000 },
      standby: 'when-hidden',
      name: 'portal-session:gpus'
    });
    this._tick = window.setInterval(() => this._update(), TICK_INTERVAL);
    window.addEventListener('focus', this._onShown);
    document.addEventListener('visibilitychange', this._onShown);
  }

  dispose(): void {
    window.clearInterval(this._tick);
    window.removeEventListener('focus', this._onShown);
    document.removeEventListener('visibilitychange', this._onShown);
    this._sessionPoll.dispose();
    this._gpusPoll.dispose();
    this.timeLeft.dispose();
    this.gpus.dispose();
  }

  /**
   * Ask for the end now, as read from Slurm at most 2 s ago.
   */
  refresh(): Promise<void> {
    this._fresh = true;
    return this._sessionPoll.refresh();
  }

  private _onShown = (): void => {
    if (document.visibilityState === 'visible') {
      void this.refresh();
      void this._gpusPoll.refresh();
    }
  };

  private async _fetchSession(): Promise<void> {
    const fresh = this._fresh;
    this._fresh = false;
    try {
      const session = await getSession(this._settings, fresh);
      this._session = session;
      this._endsAt =
        session.seconds_left === null
          ? null
          : Date.now() + session.seconds_left * 1000;
    } catch (err) {
      this._session = null;
      this._endsAt = null;
      this.timeLeft.set(
        'time left unknown',
        `Could not ask when this session ends: ${(err as Error).message}`
      );
      throw err; // the poll backs off
    }
    this._update();
  }

  private async _fetchGpus(): Promise<void> {
    try {
      const { text, title } = formatGpus(await getGpus(this._settings));
      this.gpus.set(text, title);
    } catch (err) {
      this.gpus.set('no GPU data', (err as Error).message);
      throw err;
    }
  }

  /**
   * Show the time left; show, replace or dismiss the notice.
   */
  private _update(): void {
    const session = this._session;
    if (!session) {
      return;
    }
    if (this._endsAt === null) {
      this.timeLeft.set(
        'time left unknown',
        session.reason || 'Slurm does not say when this session ends'
      );
      return;
    }
    const left = Math.max(0, Math.round((this._endsAt - Date.now()) / 1000));
    const ends = new Date(this._endsAt);
    this.timeLeft.set(
      formatTimeLeft(left),
      `This session (Slurm job ${session.job_id}) ends at ` +
        `${ends.toLocaleString()}. Click to extend it on the hub's home page.`
    );

    if (
      this._notice !== null &&
      Math.abs(this._endsAt - this._noticeEndsAt) > END_MOVED
    ) {
      // extended (or shortened): the notice's time is wrong
      Notification.dismiss(this._notice);
      this._notice = null;
      this._warned = new Set();
    }
    const due = warningDue(left, session.warn_minutes, this._warned);
    this._warned = due.warned;
    this.timeLeft.toggleClass('jp-portal-timeleft-warn', due.active);
    if (!due.active && this._notice !== null) {
      Notification.dismiss(this._notice);
      this._notice = null;
    } else if (due.notify) {
      if (this._notice !== null) {
        Notification.dismiss(this._notice);
      }
      this._notice = this._notify(session, left, ends);
      this._noticeEndsAt = this._endsAt;
    }
  }

  private _notify(session: ISession, left: number, ends: Date): string {
    const at = ends.toLocaleTimeString([], {
      hour: '2-digit',
      minute: '2-digit'
    });
    const extend = session.extend_url;
    const text =
      `Your session ends in ${formatDuration(left)}, at ${at}: ` +
      'save your work, or extend the session.';
    const actions: Notification.IAction[] = [
      {
        label: 'Extend',
        caption: "Open the hub's home page, where the session is extended",
        displayType: 'link',
        callback: () => openHubPage(extend)
      }
    ];
    const desktop = window.Notification;
    if (desktop && desktop.permission === 'default') {
      actions.push({
        label: 'Notify me on the desktop',
        caption: 'Let this browser show the next notices of this session on the desktop',
        displayType: 'link',
        callback: () => void desktop.requestPermission()
      });
    }
    desktopNotice(`Slurm job ${session.job_id}: time is running out`, text);
    return Notification.warning(text, { autoClose: false, actions });
  }

  private _settings: ServerConnection.ISettings;
  private _sessionPoll: Poll;
  private _gpusPoll: Poll;
  private _tick: number;
  private _fresh = true; // the first answer too: the page was just opened
  private _session: ISession | null = null;
  private _endsAt: number | null = null;
  private _warned: ReadonlySet<number> = new Set();
  private _notice: string | null = null;
  private _noticeEndsAt = 0;
}
