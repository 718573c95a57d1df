/**
 * The left side panel that lists the running TensorBoards.
 */
import { showErrorMessage } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  absoluteUrl,
  ITensorBoard,
  listTensorBoards,
  stopTensorBoard
} from './api';
import { tensorboardIcon } from './icon';

/**
 * How often the list is refreshed while the panel is shown, in ms.
 */
const REFRESH_INTERVAL = 5000;

export class TensorBoardPanel extends Widget {
  constructor(settings: ServerConnection.ISettings) {
    super();
    this._settings = settings;
    this.id = 'portal-tensorboard-panel';
    this.addClass('jp-portal-tensorboard-panel');
    this.title.icon = tensorboardIcon;
    this.title.caption = 'TensorBoards';

    const header = document.createElement('header');
    header.textContent = 'TensorBoards';
    this._list = document.createElement('ul');
    this._list.className = 'jp-portal-tensorboard-list';
    this._status = document.createElement('p');
    this._status.className = 'jp-portal-tensorboard-status';
    this.node.append(header, this._status, this._list);

    this._poll = new Poll({
      factory: () => this._fetch(),
      frequency: { interval: REFRESH_INTERVAL, backoff: true, max: 60_000 },
      // Only while the panel is shown in a visible browser tab.
      standby: () => (this.isVisible ? 'when-hidden' : true),
      name: 'portal-tensorboard:list'
    });
  }

  /**
   * Refresh the list now (nothing happens while the panel is hidden).
   */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
  }

  private async _fetch(): Promise<void> {
    try {
      this._render(await listTensorBoards(this._settings));
    } catch (err) {
      this._list.replaceChildren();
      this._rendered = '';
      this._status.textContent = `Could not list the TensorBoards: ${
        (err as Error).message
      }`;
      throw err; // the poll backs off
    }
  }

  private _render(tensorboards: ITensorBoard[]): void {
    const key = JSON.stringify(tensorboards);
    if (key === this._rendered) {
      return; // unchanged: keep the nodes, and the focus and hover on them
    }
    this._rendered = key;
    this._status.textContent = tensorboards.length
      ? ''
      : 'No TensorBoard is running. Select a folder in the file browser and ' +
        'click TensorBoard.';
    this._list.replaceChildren(...tensorboards.map(tb => this._item(tb)));
  }

  private _item(tb: ITensorBoard): HTMLLIElement {
    const item = document.createElement('li');
    item.className = 'jp-portal-tensorboard-item';
    item.dataset.id = tb.id;
    if (tb.started) {
      item.title = `${tb.logdir || '/'}\nstarted ${new Date(
        tb.started
      ).toLocaleString()}`;
    }

    const logdir = document.createElement('span');
    logdir.className = 'jp-portal-tensorboard-logdir';
    logdir.textContent = tb.logdir || '/';

    const open = document.createElement('a');
    open.className = 'jp-portal-tensorboard-open';
    open.textContent = 'open';
    open.target = '_blank';
    open.rel = 'noopener';
    try {
      open.href = absoluteUrl(this._settings, tb.url);
    } catch {
      open.removeAttribute('href');
    }

    const stop = document.createElement('button');
    stop.className = 'jp-mod-styled jp-mod-warn jp-portal-tensorboard-stop';
    stop.textContent = 'stop';
    stop.title = `Stop the TensorBoard on ${tb.logdir || '/'}`;
    stop.onclick = async () => {
      stop.disabled = true;
      try {
        await stopTensorBoard(this._settings, tb.id);
      } catch (err) {
        stop.disabled = false;
        await showErrorMessage('Could not stop TensorBoard', err as Error);
      }
      await this.refresh();
    };

    item.append(logdir, open, stop);
    return item;
  }

  private _settings: ServerConnection.ISettings;
  private _list: HTMLUListElement;
  private _status: HTMLParagraphElement;
  private _poll: Poll;
  private _rendered = '';
}
